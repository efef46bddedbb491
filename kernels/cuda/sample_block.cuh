// Device building blocks of the CUDA sampler (sample.cu): order-preserving 64-bit keys of fp64
// values, deterministic warp and block reductions, and an exact 128-bit fixed-point accumulator
// for probability mass, so that no result depends on the order in which threads or atomics land.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace exl3::sample_detail {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Unsigned key with the order of the double (NaN excluded); -0 and +0 map to one key because the
// reference compares them equal (so a tie between them goes to the lower id).
__device__ __forceinline__ uint64_t ordered_key(double x) {
  if (x == 0.0) x = 0.0;
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(x));
  return (bits >> 63) != 0 ? ~bits : bits | (1ull << 63);
}

__device__ __forceinline__ double key_value(uint64_t key) {
  const uint64_t bits = (key >> 63) != 0 ? key & ~(1ull << 63) : ~key;
  return __longlong_as_double(static_cast<long long>(bits));
}

// Butterfly sum: every lane ends with the same value (each stage adds the same two operands, in
// either order, on both partners), and the association is fixed, so the result is deterministic.
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ uint64_t warp_max(uint64_t v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const uint64_t other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Inclusive prefix sum over the lanes (Hillis-Steele, fixed association).
__device__ __forceinline__ double warp_inclusive_scan(double v, int lane) {
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const double other = __shfl_up_sync(kFullMask, v, offset);
    if (lane >= offset) v += other;
  }
  return v;
}

// Probability mass as an unsigned 128-bit integer in units of 2^-96: integer additions are exact
// and associative, so histogram bins filled by atomics in any order hold the same value. A
// weight w in [0, 2^31) converts exactly except for its bits below 2^-96.
struct Fixed128 {
  unsigned long long lo, hi;
};

__device__ __forceinline__ void fixed_atomic_add(Fixed128* target, double w) {
  const double scaled = w * 0x1p32;  // a power-of-two scale: exact
  const unsigned long long hi = __double2ull_rz(scaled);
  const unsigned long long lo = __double2ull_rz((scaled - static_cast<double>(hi)) * 0x1p64);
  const unsigned long long old = atomicAdd(&target->lo, lo);
  const unsigned long long carry = old + lo < old ? 1ull : 0ull;
  if (hi + carry != 0) atomicAdd(&target->hi, hi + carry);
}

__device__ __forceinline__ double fixed_value(const Fixed128& f) {
  return static_cast<double>(f.hi) * 0x1p-32 + static_cast<double>(f.lo) * 0x1p-96;
}

}  // namespace exl3::sample_detail
