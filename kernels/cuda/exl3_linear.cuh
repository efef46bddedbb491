// CUDA EXL3 linear (exl3-format.md §3, §4.4, §7): y = had128(had128(x ⊙ suh) · Wq) ⊙ svh (+ bias)
// with the trellis decoded on the fly, never expanded to a dense weight. Twin of
// exl3_linear_ref (kernels/ref/exl3_linear_ref.cpp).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace exl3 {

// C = A · Wq: A F16 [m, k] (already sign-scaled and Hadamard-rotated), Wq the decoded trellis
// (k x n, decoded on the fly in tensor-core order), C F32 [m, n]; fp32 accumulation.
struct Exl3GemmParams {
  const __half* a = nullptr;         // device [m, k]
  const int16_t* trellis = nullptr;  // device I16 [k/16, n/16, 16*bits]
  float* c = nullptr;                // device [m, n]
  int64_t m = 0, k = 0, n = 0;
  int bits = 0;                      // 1..8
  Codebook codebook = Codebook::k3Inst;
};

// Contract (EXL3_CHECK at entry): m >= 0 (m == 0 launches nothing), k, n > 0 and multiples of
// 128; bits in 1..8; pointers non-null device pointers, a and trellis 16-byte aligned. m 1..64 takes
// the few-rows path (exl3_gemv.cu: one pass over the trellis, instruction-lean decode, products on
// the tensor cores), larger m the mma path reusing each decoded tile for 128 rows.
// Every (bits, codebook) pair is instantiated from one list. Asynchronous on `stream`.
void launch_exl3_gemm(const Exl3GemmParams& p, cudaStream_t stream);

// The whole linear. x F16 [m, in_features]; columns in_features..k-1 count as zero. y [m,
// out_features] F16 (y_f32 false) or F32 (y_f32 true): the first out_features of the n padded
// outputs. Scratch: scratch_a F16 [m, k], scratch_c F32 [m, n], both caller-owned device memory.
struct Exl3LinearParams {
  const __half* x = nullptr;
  int64_t m = 0, in_features = 0, out_features = 0;
  const int16_t* trellis = nullptr;
  const __half* suh = nullptr;       // [k]
  const __half* svh = nullptr;       // [n]
  const float* bias = nullptr;       // [out_features] or null
  int64_t k = 0, n = 0;              // padded, multiples of 128; in_features <= k, out_features <= n
  int bits = 0;
  Codebook codebook = Codebook::k3Inst;
  void* y = nullptr;
  bool y_f32 = false;
  __half* scratch_a = nullptr;
  float* scratch_c = nullptr;
  // Capacity of scratch_c in floats (at least m·n; 0 reads as m·n). More room lets the GEMV path
  // (m <= 4) keep one partial product per k-slice there instead of adding them with atomics.
  int64_t scratch_c_floats = 0;
  // Capacity of scratch_a in halves (at least m·k; 0 reads as m·k). Where it holds the few-rows
  // path's prestaged A (8 rows or more: the staged layout of every grouped linear and MUL1's row
  // sums, exl3_gemv.cu), that path transforms x once instead of in every block.
  int64_t scratch_a_halves = 0;
  // The few-rows path quantizes the transformed input to int8 per 128 inputs
  // (kernels/int8_activations.h): MUL1 only, m <= 32 (EXL3_CHECK in the grouped launch). Where
  // scratch_c cannot hold that path's slices, launch_exl3_linear runs the fp16 path instead.
  bool int8_activations = false;
  // The few-rows path's fused RMSNorm (m <= kGemvNormMaxRows, exl3_gemv.cuh): with norm_x set, the
  // input is fp16(rms_norm(norm_x, norm_weight, norm_eps)) computed as the matmul stages it
  // (norm_x F32 [m, in_features], norm_weight F32 [in_features]; x is not read).
  const float* norm_x = nullptr;
  const float* norm_weight = nullptr;
  float norm_eps = 0.0f;
  // The few-rows path's input already staged as gemv_staged_layout(m, k, codebook,
  // int8_activations) says (a linear_add's hand-off, GemvNormHandoff; m <= kGemvHandoffMaxRows):
  // its blocks copy their slices of it, and neither x nor norm_x is read.
  const uint32_t* staged_input = nullptr;
};

// Contract: as launch_exl3_gemm plus in_features in 1..k, out_features in 1..n. Numerics follow
// ExLlamaV3: x ⊙ suh rounded to fp16, butterflies in fp32, ×1/sqrt(128), rounded to fp16 (the
// GEMM input); GEMM accumulates in fp32; output Hadamard in fp32, × svh, + bias, rounded once to
// the output dtype. Asynchronous on `stream`.
void launch_exl3_linear(const Exl3LinearParams& p, cudaStream_t stream);

// The two halves of launch_exl3_linear around its GEMM, for callers that compute scratch_c =
// scratch_a · Wq another way (e.g. the CUDA backend's dequantize-then-cuBLAS path for long
// prefills): x -> scratch_a (x ⊙ suh, Hadamard, fp16) and scratch_c -> y (Hadamard, ⊙ svh, + bias).
// Same contract as launch_exl3_linear.
void launch_exl3_input_transform(const Exl3LinearParams& p, cudaStream_t stream);
void launch_exl3_output_transform(const Exl3LinearParams& p, cudaStream_t stream);
// The output transform of `slices` partial products in scratch_c (F32 [slices, m, n], summed in
// slice order first); slices · m · n must fit p.scratch_c_floats.
void launch_exl3_output_transform_slices(const Exl3LinearParams& p, int64_t slices, cudaStream_t stream);

// The current device's SM count (cached per device; safe while a stream is being captured).
int device_sm_count();

}  // namespace exl3
