// The NEOX rotary embedding's arithmetic, shared by launch_rope (rope.cu), the fused RoPE + cache
// write (rope_kv_write.cu) and the q/k/v output pass that rotates (exl3_gemv_output.cu), so that all
// give the same results bit for bit: the angle as one fp32 product, cos and sin scaled by
// attention_scaling, each rotated element rounded to fp16 once.
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

// The pair (x1, x2) = (x[d], x[d + half]) rotated by the scaled (c, s): each product and the sum
// rounded on their own (as rope_ref's plain fp32 expressions), never contracted into an FMA, whose
// use the compiler would otherwise choose kernel by kernel (the fused q/k/v output pass and
// rope_kv_write then differed by an fp16 ulp now and then).
__device__ __forceinline__ void rotate_pair(float x1, float x2, float c, float s, __half& r1, __half& r2) {
  r1 = __float2half_rn(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
  r2 = __float2half_rn(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

}  // namespace exl3::rope_rotation
