// The NEOX rotary embedding's arithmetic, shared by launch_rope (rope.cu) and the fused RoPE +
// cache write (rope_kv_write.cu) so that both give rope_ref's results bit for bit: the angle as one
// fp32 product, cos and sin scaled by attention_scaling, each rotated element rounded to fp16 once.
#pragma once

#include <cuda_fp16.h>

namespace exl3::rope_rotation {

// cos and sin of pos · freq, times attention_scaling. One fp32 product (no contraction possible),
// as transformers forms the angle.
__device__ __forceinline__ void scaled_cos_sin(float pos, float freq, float scaling, float& c, float& s) {
  const float angle = __fmul_rn(pos, freq);
  sincosf(angle, &s, &c);
  c *= scaling;
  s *= scaling;
}

// The pair (x1, x2) = (x[d], x[d + half]) rotated by the scaled (c, s).
__device__ __forceinline__ void rotate_pair(float x1, float x2, float c, float s, __half& r1, __half& r2) {
  r1 = __float2half_rn(x1 * c - x2 * s);
  r2 = __float2half_rn(x2 * c + x1 * s);
}

}  // namespace exl3::rope_rotation
