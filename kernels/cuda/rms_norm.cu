// CUDA RMSNorm: the device twin of rms_norm_ref. One block per row: the block sums x² in fp32,
// then every thread scales the elements it read (kept in registers for rows up to 16384 wide), so
// out may alias x (each element is read and written by the same thread, after the block-wide sum).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace exl3 {
namespace {

constexpr int kMaxThreads = 1024;
// The launch picks threads for about this many elements each: fewer threads mean a cheaper block
// sum; 8 measured best in the 8B decode on an H200 (a 4096-wide row: 3.4 us, 5.0 at 4, 3.2 at 16).
constexpr int kElementsPerThread = 8;
constexpr int kWarpSize = 32;

// Sum of `v` over the block (blockDim.x a multiple of 32), returned to every thread.
__device__ float block_sum(float v) {
  __shared__ float partial[kMaxThreads / kWarpSize];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += partial[w];
  return total;
}

// Elements one thread keeps in registers between the sum and the scaling (dims up to
// kThreadsPerRow · kPerThread take the single pass; wider rows read x twice).
constexpr int kPerThread = 16;

// No __restrict__: out may alias x.
template <typename Tin, typename Tout>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_kernel(const Tin* x, const float* __restrict__ weight, Tout* out, int64_t dim,
                                float eps) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  const int stride = static_cast<int>(blockDim.x);
  const int tid = static_cast<int>(threadIdx.x);
  if (dim <= static_cast<int64_t>(stride) * kPerThread) {
    // One pass over memory: every load issued before the sum, the values kept for the scaling.
    // The weights are read alongside x, so the row costs one memory round trip.
    // The weights are constants of the model: read before the kernels this one depends on finish.
    float v[kPerThread];
    float w[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = tid + static_cast<int64_t>(j) * stride;
      w[j] = i < dim ? weight[i] : 0.0f;
    }
    wait_for_prerequisites();
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = tid + static_cast<int64_t>(j) * stride;
      v[j] = i < dim ? cuda_io::to_f32(x[base + i]) : 0.0f;
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) sum_sq += v[j] * v[j];
    const float scale = 1.0f / sqrtf(block_sum(sum_sq) / static_cast<float>(dim) + eps);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t i = tid + static_cast<int64_t>(j) * stride;
      if (i < dim) out[base + i] = cuda_io::from_f32<Tout>(v[j] * scale * w[j]);
    }
    return;
  }
  wait_for_prerequisites();
  float sum_sq = 0.0f;
  for (int64_t i = tid; i < dim; i += stride) {
    const float v = cuda_io::to_f32(x[base + i]);
    sum_sq += v * v;
  }
  const float scale = 1.0f / sqrtf(block_sum(sum_sq) / static_cast<float>(dim) + eps);
  for (int64_t i = tid; i < dim; i += stride) {
    const float v = cuda_io::to_f32(x[base + i]);
    out[base + i] = cuda_io::from_f32<Tout>(v * scale * weight[i]);
  }
}

bool is_f32_or_f16(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF16; }

}  // namespace

// Contract: rows >= 0, dim > 0; x and out F32 or F16, device pointers, non-null when rows > 0;
// weight F32 [dim]; out == x only with x_dtype == out_dtype; rows < 2^31.
void launch_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.rows >= 0 && p.dim > 0, "rms_norm: rows ", p.rows, " dim ", p.dim);
  EXL3_CHECK(is_f32_or_f16(p.x_dtype) && is_f32_or_f16(p.out_dtype), "rms_norm: x ", dtype_name(p.x_dtype),
             " out ", dtype_name(p.out_dtype), " (F32 or F16 only)");
  EXL3_CHECK(p.x != p.out || p.x_dtype == p.out_dtype, "rms_norm: in place needs one dtype");
  EXL3_CHECK(p.rows <= std::numeric_limits<int32_t>::max(), "rms_norm: too many rows ", p.rows);
  if (p.rows == 0) return;
  EXL3_CHECK(p.x != nullptr && p.weight != nullptr && p.out != nullptr, "rms_norm: null pointer");
  // About kElementsPerThread elements a thread (all loads of a row in flight at once), whole warps.
  const int64_t wanted = (p.dim + kElementsPerThread - 1) / kElementsPerThread;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (wanted + kWarpSize - 1) / kWarpSize * kWarpSize));
  cuda_io::visit_float_dtype(p.x_dtype, "rms_norm x", [&](auto in_tag) {
    using Tin = typename decltype(in_tag)::type;
    cuda_io::visit_float_dtype(p.out_dtype, "rms_norm out", [&](auto out_tag) {
      using Tout = typename decltype(out_tag)::type;
      launch_dependent(rms_norm_kernel<Tin, Tout>, dim3(static_cast<unsigned>(p.rows)), dim3(threads), stream,
                       static_cast<const Tin*>(p.x), p.weight, static_cast<Tout*>(p.out), p.dim, p.eps);
      EXL3_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace exl3
