// CPU reference (the spec) of int8 activations for the few-rows EXL3 matmul
// (kernels/int8_activations.h says when they apply): the per-block quantization of the transformed
// input and the MUL1 matmul that consumes it.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace exl3 {

// The transformed input of an EXL3 linear quantized per aligned block of 128 inputs.
struct Int8ActivationsRef {
  Tensor q;       // I8 [m, k], each in -127..127
  Tensor scales;  // F32 [m, k / 128]; the block's values are q · scale
};

// One block of 128 values: a NaN or infinite value gives a NaN scale and q = 0 (the block's values
// become NaN, as a non-finite input would make the fp16 path's outputs); else amax = max |a|
// (fp32); amax == 0 gives scale 0 and q = 0; otherwise
// inv = 127 / amax (fp32 division), q = clamp(round-half-even(a · inv) (fp32 product), -127, 127)
// and scale = amax / 127 (fp32 division). Returns the scale.
float int8_quantize_block_ref(const float* a, int8_t* q);

// Every row and block of a (F32 [m, k], k a positive multiple of 128).
Int8ActivationsRef int8_quantize_activations_ref(const Tensor& a);

// a' = q · scale: F32 [m, k].
Tensor int8_dequantize_activations_ref(const Int8ActivationsRef& qa);

// In place a := a' (quantize, then dequantize) over `rows` rows of `k` values (k a multiple of
// 128): what the matmul sees instead of a. The CPU backend's int8 path calls this.
void int8_quantize_dequantize_ref(float* a, int64_t rows, int64_t k);

// The few-rows MUL1 matmul over int8 activations, C[m, n] in double:
//   C[r, j] = Σ_B scale[r, B] · Σ_{i∈B} q[r, i] · value(W[i, j]),
// value = KINV · (1024 + t) + KBIAS unrounded (t the byte sum of state · 0x83DCD12D, KINV =
// 0.00676727294921875, KBIAS = -10.3828125; exl3-format.md §5), the state as exl3_decode_states_ref
// reads it from `trellis` (I16 [k/16, n/16, 16·bits]). qa.q must be [m, k]. Row-major [m, n].
std::vector<double> exl3_gemv_int8_ref(const Tensor& trellis, int bits, const Int8ActivationsRef& qa);
// The same with the quantization done here: a F32 [m, k] (the transformed input).
std::vector<double> exl3_gemv_int8_ref(const Tensor& trellis, int bits, const Tensor& a);

// The MUL1 value above for one state, in double (unrounded; exl3_codebook_ref rounds it to fp16).
double exl3_mul1_value_ref(uint16_t state);

}  // namespace exl3
