// CUDA EXL3 linear (exl3-format.md §3, §7): input transform (x ⊙ suh, 128-point WHT) into the
// fp16 scratch A, the on-the-fly trellis GEMM into the fp32 scratch C, output transform (WHT,
// ⊙ svh, + bias) into y. One warp per 128-element block in both transforms. m <= kGemvMaxRows
// takes the few-rows path's two-launch linear (exl3_gemv.cuh), which does the input transform
// itself, when scratch_c has room for its partial products.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_linear.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3 {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int64_t kBlock = wht128::kBlock;

// a[row, :] = fp16(had128(fp16(x[row, :] ⊙ suh)) / sqrt(128)), columns >= in_features as zero.
// The fp16 product of two fp16 values is one rounding of the exact product (ExLlamaV3's pre-scale).
__global__ void exl3_input_transform_kernel(const __half* __restrict__ x,
                                            const __half* __restrict__ suh,
                                            __half* __restrict__ a, int64_t num_blocks,
                                            int64_t in_features, int64_t k) {
  const int64_t block =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (block >= num_blocks) return;  // whole warps leave together: shuffles stay full-mask
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t blocks_per_row = k / kBlock;
  const int64_t row = block / blocks_per_row;
  const int64_t col0 = (block % blocks_per_row) * kBlock + wht128::kPerLane * lane;

  float v[wht128::kPerLane];
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int64_t col = col0 + e;
    v[e] = col < in_features ? __half2float(__hmul(x[row * in_features + col], suh[col])) : 0.0f;
  }
  wht128::transform(v, lane);
  __half2* dst = reinterpret_cast<__half2*>(a + row * k + col0);
  dst[0] = __floats2half2_rn(v[0] * wht128::kScale, v[1] * wht128::kScale);
  dst[1] = __floats2half2_rn(v[2] * wht128::kScale, v[3] * wht128::kScale);
}

// y[row, j] = had128(c[row, :])[j] / sqrt(128) · svh[j] (+ bias[j]) for j < out_features, all in
// fp32 and rounded once to the output type. (ExLlamaV3 rounds to fp16 before multiplying by svh in
// fp16; keeping fp32 until the end is at least as accurate and differs at fp16-rounding level.)
// c may hold several partial products (GEMV k-slices) `slice_stride` floats apart: summed first,
// in slice order.
template <typename Out>
__global__ void exl3_output_transform_kernel(const float* __restrict__ c,
                                             const __half* __restrict__ svh,
                                             const float* __restrict__ bias, Out* __restrict__ y,
                                             int64_t num_blocks, int64_t out_features, int64_t n,
                                             int64_t slices, int64_t slice_stride) {
  const int64_t block =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (block >= num_blocks) return;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t blocks_per_row = n / kBlock;
  const int64_t row = block / blocks_per_row;
  const int64_t col0 = (block % blocks_per_row) * kBlock + wht128::kPerLane * lane;

  float4 in = *reinterpret_cast<const float4*>(c + row * n + col0);
  for (int64_t s = 1; s < slices; ++s) {
    const float4 more = *reinterpret_cast<const float4*>(c + s * slice_stride + row * n + col0);
    in.x += more.x;
    in.y += more.y;
    in.z += more.z;
    in.w += more.w;
  }
  float v[wht128::kPerLane] = {in.x, in.y, in.z, in.w};
  wht128::transform(v, lane);
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int64_t col = col0 + e;
    if (col >= out_features) continue;
    float out = v[e] * wht128::kScale * __half2float(svh[col]);
    if (bias != nullptr) out += bias[col];
    if constexpr (sizeof(Out) == sizeof(float)) {
      y[row * out_features + col] = out;
    } else {
      y[row * out_features + col] = __float2half_rn(out);
    }
  }
}

unsigned warp_grid(int64_t num_blocks) {
  const int64_t grid = (num_blocks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  EXL3_CHECK(grid <= std::numeric_limits<int32_t>::max(), "too many 128-blocks: ", num_blocks);
  return static_cast<unsigned>(grid);
}

void check_linear_params(const Exl3LinearParams& p) {
  EXL3_CHECK(p.m >= 0, "m must be >= 0, got ", p.m);
  EXL3_CHECK(p.k > 0 && p.k % kBlock == 0, "k must be a positive multiple of 128, got ", p.k);
  EXL3_CHECK(p.n > 0 && p.n % kBlock == 0, "n must be a positive multiple of 128, got ", p.n);
  EXL3_CHECK(p.in_features >= 1 && p.in_features <= p.k, "in_features ", p.in_features,
             " must be in 1..k=", p.k);
  EXL3_CHECK(p.out_features >= 1 && p.out_features <= p.n, "out_features ", p.out_features,
             " must be in 1..n=", p.n);
  EXL3_CHECK(p.bits >= 1 && p.bits <= 8, "bits must be in 1..8, got ", p.bits);
  EXL3_CHECK(p.x != nullptr && p.trellis != nullptr && p.suh != nullptr && p.svh != nullptr &&
                 p.y != nullptr && p.scratch_a != nullptr && p.scratch_c != nullptr,
             "null pointer");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.scratch_a) % 16 == 0, "scratch_a must be 16-byte aligned");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.scratch_c) % 16 == 0, "scratch_c must be 16-byte aligned");
}

}  // namespace

void launch_exl3_input_transform(const Exl3LinearParams& p, cudaStream_t stream) {
  check_linear_params(p);
  if (p.m == 0) return;
  const int64_t in_blocks = p.m * (p.k / kBlock);
  exl3_input_transform_kernel<<<warp_grid(in_blocks), kWarpsPerBlock * kWarpSize, 0, stream>>>(
      p.x, p.suh, p.scratch_a, in_blocks, p.in_features, p.k);
  EXL3_CUDA_CHECK_LAUNCH();
}

void launch_exl3_output_transform(const Exl3LinearParams& p, cudaStream_t stream) {
  launch_exl3_output_transform_slices(p, 1, stream);
}

void launch_exl3_output_transform_slices(const Exl3LinearParams& p, int64_t slices, cudaStream_t stream) {
  check_linear_params(p);
  EXL3_CHECK(slices >= 1 && slices * p.m * p.n <= std::max(p.scratch_c_floats, p.m * p.n), "output transform: ",
             slices, " slices of [", p.m, ", ", p.n, "] do not fit scratch_c (", p.scratch_c_floats, " floats)");
  if (p.m == 0) return;
  const int64_t out_blocks = p.m * (p.n / kBlock);
  const unsigned grid = warp_grid(out_blocks);
  const int64_t stride = p.m * p.n;
  if (p.y_f32) {
    exl3_output_transform_kernel<float><<<grid, kWarpsPerBlock * kWarpSize, 0, stream>>>(
        p.scratch_c, p.svh, p.bias, static_cast<float*>(p.y), out_blocks, p.out_features, p.n, slices, stride);
  } else {
    exl3_output_transform_kernel<__half><<<grid, kWarpsPerBlock * kWarpSize, 0, stream>>>(
        p.scratch_c, p.svh, p.bias, static_cast<__half*>(p.y), out_blocks, p.out_features, p.n, slices, stride);
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

void launch_exl3_linear(const Exl3LinearParams& p, cudaStream_t stream) {
  check_linear_params(p);
  if (p.m == 0) return;
  if (p.m <= kGemvMaxRows && exl3_gemv_linear_fits(p)) {
    Exl3LinearParams q = p;
    q.scratch_c_floats = std::max(p.scratch_c_floats, p.m * p.n);
    launch_exl3_gemv_linear(q, device_sm_count(), stream);
    return;
  }
  // Here with int8_activations only when scratch_c cannot hold the few-rows path's slices (a step
  // limit of very few rows): the linear runs with fp16 activations rather than fail.
  EXL3_CHECK(p.norm_x == nullptr, "the fused RMSNorm needs the few-rows path (", p.m, " rows)");
  launch_exl3_input_transform(p, stream);
  Exl3GemmParams gemm;
  gemm.a = p.scratch_a;
  gemm.trellis = p.trellis;
  gemm.c = p.scratch_c;
  gemm.m = p.m;
  gemm.k = p.k;
  gemm.n = p.n;
  gemm.bits = p.bits;
  gemm.codebook = p.codebook;
  launch_exl3_gemm(gemm, stream);
  launch_exl3_output_transform(p, stream);
}

}  // namespace exl3
