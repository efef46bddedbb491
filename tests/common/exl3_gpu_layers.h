// Random EXL3 layers for the GPU kernel tests (host and device copies) and one call of
// launch_exl3_linear on them, shared by exl3_linear_gpu_test and exl3_gemv_int8_gpu_test.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_linear.cuh"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3::testing {

// `count` trellis words from a xorshift32 generator seeded with `seed` (any bit pattern is a valid
// trellis).
inline std::vector<int16_t> random_trellis_words(size_t count, uint32_t seed) {
  std::vector<int16_t> words(count);
  uint32_t state = seed;
  for (int16_t& v : words) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    v = static_cast<int16_t>(state & 0xFFFFu);
  }
  return words;
}

inline std::vector<uint16_t> random_halves(size_t count, float lo, float hi, bool random_sign,
                                    std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::vector<uint16_t> out(count);
  for (uint16_t& h : out) {
    const float v = mag(rng);
    h = float_to_half_bits(random_sign && (rng() & 1u) ? -v : v);
  }
  return out;
}

inline std::vector<uint16_t> normal_halves(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (uint16_t& h : out) h = float_to_half_bits(dist(rng));
  return out;
}

inline Tensor half_tensor(const std::vector<uint16_t>& bits, Shape shape) {
  Tensor t = Tensor::zeros(DType::kF16, std::move(shape));
  EXL3_CHECK(static_cast<int64_t>(bits.size()) == t.numel(), "half_tensor: ", bits.size(), " values for ",
             t.numel(), " elements");
  std::memcpy(t.mutable_raw(), bits.data(), bits.size() * sizeof(uint16_t));
  return t;
}

// A layer in host memory: trellis words, suh and svh as fp16 bits.
struct HostLayer {
  int64_t k = 0;
  int64_t n = 0;
  int bits = 0;
  Codebook codebook = Codebook::k3Inst;
  std::vector<int16_t> trellis;
  std::vector<uint16_t> suh;
  std::vector<uint16_t> svh;

  Tensor trellis_tensor() const { return Tensor::from_vector(trellis, {k / 16, n / 16, 16 * bits}); }
  Exl3Weight weight() const {
    Exl3Weight w;
    w.k = k;
    w.n = n;
    w.bits = bits;
    w.codebook = codebook;
    w.trellis = trellis_tensor();
    w.suh = half_tensor(suh, {k});
    w.svh = half_tensor(svh, {n});
    return w;
  }
};

inline HostLayer random_layer(int64_t k, int64_t n, int bits, Codebook codebook, uint32_t seed) {
  std::mt19937 rng(seed);
  HostLayer layer;
  layer.k = k;
  layer.n = n;
  layer.bits = bits;
  layer.codebook = codebook;
  layer.trellis.resize(static_cast<size_t>(k / 16 * (n / 16) * 16 * bits));
  for (int16_t& w : layer.trellis) w = static_cast<int16_t>(rng() & 0xFFFFu);
  layer.suh = random_halves(static_cast<size_t>(k), 0.5f, 1.5f, true, rng);
  layer.svh = random_halves(static_cast<size_t>(n), 0.5f, 1.5f, true, rng);
  return layer;
}

// The layer's tensors on the device.
struct DeviceLayer {
  explicit DeviceLayer(const HostLayer& h)
      : trellis(h.trellis.size()), suh(h.suh.size()), svh(h.svh.size()) {
    trellis.upload(h.trellis.data(), h.trellis.size());
    suh.upload(h.suh.data(), h.suh.size());
    svh.upload(h.svh.data(), h.svh.size());
  }
  DeviceBuffer<int16_t> trellis;
  DeviceBuffer<__half> suh;
  DeviceBuffer<__half> svh;
};

struct LinearCall {
  int64_t m = 0;
  int64_t in_features = 0;
  int64_t out_features = 0;
  const uint16_t* x = nullptr;      // host fp16 bits [m, in_features]
  const float* bias = nullptr;      // host [out_features] or null
  bool y_f32 = false;
  int64_t scratch_rows = 0;         // rows of n floats in scratch_c and of k halves in scratch_a (at least m)
  int64_t scratch_a_rows = 0;       // rows of k halves in scratch_a (at least m); 0: scratch_rows
  bool int8_activations = false;    // Exl3LinearParams::int8_activations
  // Exl3LinearParams::norm_x: host F32 [m, in_features] normalized by the matmul (x is then unused).
  const float* norm_x = nullptr;
  const float* norm_weight = nullptr;  // host [in_features]
  float norm_eps = 0.0f;
};

// Runs launch_exl3_linear and returns y [m, out_features] as floats. The output buffer carries a
// guard region after y; it must come back untouched.
inline std::vector<float> gpu_linear(const HostLayer& h, const DeviceLayer& d, const LinearCall& call) {
  constexpr size_t kGuardBytes = 256;
  constexpr uint8_t kSentinel = 0xA5;
  const size_t x_count = static_cast<size_t>(call.m * call.in_features);
  const size_t y_count = static_cast<size_t>(call.m * call.out_features);
  const size_t y_bytes = y_count * (call.y_f32 ? sizeof(float) : sizeof(uint16_t));
  DeviceBuffer<__half> x(x_count);
  x.upload(call.x, x_count);
  DeviceBuffer<float> bias(static_cast<size_t>(call.out_features));
  if (call.bias != nullptr) bias.upload(call.bias, static_cast<size_t>(call.out_features));
  // scratch_rows also sizes scratch_a unless scratch_a_rows does: with room past m·k the few-rows
  // path prestages its input (launch_gemv_stage, launch_gemv_stage_int8); with m·k alone its blocks
  // stage their own slices.
  const int64_t scratch_rows = std::max(call.m, call.scratch_rows);
  const int64_t scratch_a_rows = std::max(call.m, call.scratch_a_rows > 0 ? call.scratch_a_rows : scratch_rows);
  DeviceBuffer<__half> scratch_a(static_cast<size_t>(scratch_a_rows * h.k));
  DeviceBuffer<float> scratch_c(static_cast<size_t>(scratch_rows * h.n));
  DeviceBuffer<uint8_t> y(y_bytes + kGuardBytes);
  EXL3_CUDA_CHECK(cudaMemset(y.get(), kSentinel, y_bytes + kGuardBytes));

  Exl3LinearParams p;
  p.x = x.get();
  p.m = call.m;
  p.in_features = call.in_features;
  p.out_features = call.out_features;
  p.trellis = d.trellis.get();
  p.suh = d.suh.get();
  p.svh = d.svh.get();
  p.bias = call.bias != nullptr ? bias.get() : nullptr;
  p.k = h.k;
  p.n = h.n;
  p.bits = h.bits;
  p.codebook = h.codebook;
  p.y = y.get();
  p.y_f32 = call.y_f32;
  p.scratch_a = scratch_a.get();
  p.scratch_c = scratch_c.get();
  p.scratch_c_floats = scratch_rows * h.n;
  p.scratch_a_halves = scratch_a_rows * h.k;
  p.int8_activations = call.int8_activations;
  const size_t norm_count = call.norm_x != nullptr ? x_count : 1;
  DeviceBuffer<float> norm_x(norm_count);
  DeviceBuffer<float> norm_weight(static_cast<size_t>(call.in_features));
  if (call.norm_x != nullptr) {
    norm_x.upload(call.norm_x, x_count);
    norm_weight.upload(call.norm_weight, static_cast<size_t>(call.in_features));
    p.norm_x = norm_x.get();
    p.norm_weight = norm_weight.get();
    p.norm_eps = call.norm_eps;
  }
  launch_exl3_linear(p, nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<uint8_t> raw(y_bytes + kGuardBytes);
  y.download(raw.data(), raw.size());
  const int64_t guard_damage = std::count_if(raw.begin() + static_cast<int64_t>(y_bytes), raw.end(),
                                             [](uint8_t b) { return b != kSentinel; });
  EXPECT_EQ(guard_damage, 0) << "bytes written past y [" << call.m << ", " << call.out_features << "]";

  std::vector<float> out(y_count);
  if (call.y_f32) {
    std::memcpy(out.data(), raw.data(), y_bytes);
  } else {
    for (size_t i = 0; i < y_count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, raw.data() + 2 * i, sizeof(bits));
      out[i] = half_bits_to_float(bits);
    }
  }
  return out;
}

}  // namespace exl3::testing
