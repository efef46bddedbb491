// Device helper for the EXL3 linear's activation transforms (exl3-format.md §3): one warp computes
// the 128-point Walsh-Hadamard transform of one block in fp32, 4 consecutive elements per lane.
#pragma once

namespace exl3::wht128 {

constexpr int kBlock = 128;
constexpr int kPerLane = 4;  // lane l holds elements 4l .. 4l+3
// 1/sqrt(128) as ExLlamaV3's had_r_128 writes it (the same fp32 value as 1/sqrtf(128)).
constexpr float kScale = 0.088388347648f;

// x · H128 (natural order, unscaled) of the block spread over the warp; every lane must call it.
__device__ __forceinline__ void transform(float (&x)[kPerLane], int lane) {
  // Butterflies of half-size 1 and 2: both partners in the same lane.
#pragma unroll
  for (int h = 1; h < kPerLane; h *= 2) {
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      if ((e & h) != 0) continue;
      const float a = x[e];
      const float b = x[e + h];
      x[e] = a + b;
      x[e + h] = a - b;
    }
  }
  // Half-sizes 4 .. 64: element i pairs with i ^ h, held by lane ^ (h / 4) in the same slot.
#pragma unroll
  for (int lane_mask = 1; lane_mask < 32; lane_mask *= 2) {
    const bool upper = (lane & lane_mask) != 0;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, x[e], lane_mask);
      x[e] = upper ? other - x[e] : x[e] + other;
    }
  }
}

}  // namespace exl3::wht128
