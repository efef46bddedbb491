// CUDA blockwise 128-point WHT: one warp per 128-element block, 4 consecutive elements per lane.
// Butterfly stages h = 1, 2 run inside a lane, h = 4..64 across lanes with __shfl_xor_sync, in the
// same order and with the same additions as hadamard128_ref.
#include "kernels/cuda/hadamard128.cuh"

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;
constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;  // 256 threads: enough warps per SM to hide load latency
constexpr float kInvSqrt128 = 0.08838834764831845f;  // 1 / sqrt(128)
constexpr unsigned kFullMask = 0xFFFFFFFFu;

__global__ void hadamard128_kernel(float* __restrict__ data, int64_t num_blocks) {
  const int64_t block = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (block >= num_blocks) return;  // whole warps leave together: shuffles stay full-mask
  const int lane = threadIdx.x % kWarpSize;

  float4* ptr = reinterpret_cast<float4*>(data + block * kBlock) + lane;
  const float4 v = *ptr;
  float x[4] = {v.x, v.y, v.z, v.w};  // elements 4·lane + 0..3

  // h = 1 and h = 2: partners in the same lane.
  for (int h = 1; h < 4; h *= 2) {
    for (int e = 0; e < 4; ++e) {
      if ((e & h) != 0) continue;
      const float a = x[e];
      const float b = x[e + h];
      x[e] = a + b;
      x[e + h] = a - b;
    }
  }
  // h = 4 .. 64: element i pairs with i ^ h, which lives in lane ^ (h / 4), same slot.
  for (int lane_mask = 1; lane_mask < kWarpSize; lane_mask *= 2) {
    const bool upper = (lane & lane_mask) != 0;
    for (int e = 0; e < 4; ++e) {
      const float other = __shfl_xor_sync(kFullMask, x[e], lane_mask);
      x[e] = upper ? other - x[e] : x[e] + other;
    }
  }
  *ptr = make_float4(x[0] * kInvSqrt128, x[1] * kInvSqrt128, x[2] * kInvSqrt128,
                     x[3] * kInvSqrt128);
}

}  // namespace

void launch_hadamard128(const Hadamard128Params& params, cudaStream_t stream) {
  EXL3_CHECK(params.rows >= 0, "rows ", params.rows);
  EXL3_CHECK(params.cols >= 0 && params.cols % kBlock == 0, "cols must be a multiple of 128, got ",
             params.cols);
  const int64_t num_blocks = params.rows * params.cols / kBlock;
  if (num_blocks == 0) return;
  EXL3_CHECK(params.data != nullptr, "null data");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(params.data) % 16 == 0, "data must be 16-byte aligned");
  const int64_t grid = (num_blocks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  EXL3_CHECK(grid <= std::numeric_limits<int32_t>::max(), "too many blocks: ", num_blocks);

  hadamard128_kernel<<<static_cast<unsigned>(grid), kWarpsPerBlock * kWarpSize, 0, stream>>>(
      params.data, num_blocks);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
