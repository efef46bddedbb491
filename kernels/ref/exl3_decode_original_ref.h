// CPU reference (the spec) of decoding an EXL3 weight into the original basis, the operand of the
// long-prefill GEMM (exl3-format.md §3, §7 item 3): W = diag(suh) · BD(H) · Wq · BD(H) · diag(svh)
// in fp16, [k, n] with rows = input features, so that y = x · W on the raw input.
#pragma once

#include "kernels/ops.h"
#include "kernels/tensor.h"

namespace exl3 {

// The rounding, chosen over get_weight_tensor's four fp16 roundings (fixtures/README.md) for one
// final rounding, and followed bit for bit by the CUDA kernel (exl3_decode_original.cuh):
//   1. Wq = exl3_decode_ref(trellis) (fp16 values, exact in fp32);
//   2. T = Wq · BD(H128) unscaled: on each row, each 128-block gets the Sylvester butterfly in fp32,
//      stages of half-size h = 1, 2, 4, ..., 64, each pairing i with i + h as (a + b, a - b);
//   3. T = BD(H128) · T unscaled: the same butterfly down each column of each 128x128 block;
//   4. s = (suh[i] · 2^-7) · svh[j] in fp32 (exact: a product of two fp16 values and a power of two);
//   5. W[i][j] = fp16_rn(fp32_rn(T[i][j] · s)).
// Both Hadamards' 1/sqrt(128) factors make the 2^-7 of step 4. |W - exact| <= half an fp16 ulp of W
// plus fp32 summation noise (below 2^-20 of the largest |W|); ExLlamaV3's weight_reconstructed, with
// its intermediate roundings, is within one ulp of the largest weights (exl3_decode_original_test).
// Returns F16 [k, n]. The weight's shapes are checked as exl3_dequantize_ref checks them.
Tensor exl3_decode_original_ref(const Exl3Weight& w);

}  // namespace exl3
