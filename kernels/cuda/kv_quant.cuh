// Warp-level quantization of the KV cache (exl3-format.md §9): one warp per 32-element group, lane e
// holding element e. The WHT is five shuffle butterflies (distances 1, 2, 4, 8, 16, as
// kv_quantize_group_ref), the scale a warp max, the bit planes OR-reduced over lane segments. The
// fp32 operations are those of the reference in the same order, so words and scales are bit-equal
// to it. Every lane of the warp must call these together. (Attention dequantizes a whole group per
// thread instead: kv_quant_tile.cuh.)
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace exl3::kv_quant {

constexpr float kInvSqrt32 = 0.17677669529663688f;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Unscaled natural-order 32-point WHT across the warp: lane e gets Σ_i (-1)^popcount(i & e) v_i.
__device__ __forceinline__ float warp_wht32(float v, int lane) {
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
    const float partner = __shfl_xor_sync(kFullMask, v, h);
    v = (lane & h) != 0 ? partner - v : v + partner;
  }
  return v;
}

// Quantizes the warp's group (lane e holds element e, an fp16 value widened) at `bits` (2..8):
// lanes write the group's `bits` words, lane 0 its fp16 scale.
__device__ __forceinline__ void warp_quantize_group(float v, int bits, int lane, uint32_t* words, __half* scale) {
  const float w = warp_wht32(v, lane) * kInvSqrt32;
  float max_abs = fabsf(w);
#pragma unroll
  for (int h = 16; h > 0; h /= 2) max_abs = fmaxf(max_abs, __shfl_xor_sync(kFullMask, max_abs, h));
  const float s = max_abs + 1e-10f;
  if (lane == 0) *scale = __float2half_rn(s);
  const float inv = 1.0f / s;
  const float m = static_cast<float>(1 << (bits - 1));
  const float top = static_cast<float>((1 << bits) - 1);
  const auto q = static_cast<uint32_t>(fminf(fmaxf(floorf(fmaf(w * inv, m, m)), 0.0f), top));
#pragma unroll
  for (int pw = 8; pw >= 1; pw /= 2) {
    if ((bits & pw) == 0) continue;
    // A plane of width pw: segments of 32 / pw lanes fill one word each (lane e at bit (e·pw) % 32).
    const int seg = 32 / pw;
    uint32_t part = ((q >> (bits & (pw - 1))) & ((1u << pw) - 1u)) << ((lane % seg) * pw);
    for (int off = 1; off < seg; off *= 2) part |= __shfl_xor_sync(kFullMask, part, off);
    if (lane % seg == 0) words[(bits & ~(2 * pw - 1)) + lane / seg] = part;
  }
}

}  // namespace exl3::kv_quant
