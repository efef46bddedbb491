// The long-prefill EXL3 linear (exl3-format.md §7 item 3): the weight decoded into the original
// basis (exl3_decode_original.cuh) a slab of output columns at a time into an fp16 staging buffer,
// and one cuBLAS GEMM per slab on the raw input: no activation Hadamards, no fp32 partial sums to
// add up across slabs (each slab's GEMM covers the whole input dimension).
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/exl3_linear.cuh"

namespace exl3 {

// From this many rows on, the CUDA backend's long-prefill linear takes this path instead of the
// inner-basis one (cuda_linear.cpp: x ⊙ suh and its Hadamard, Wq decoded in 64 MiB row chunks whose
// fp32 products are added up in scratch_c, the output Hadamard). Estimated for an 8B MLP linear
// (4096 x 14336) at 256 rows on an H200: that path moves ~55 MB more (the transformed input, the fp32
// product read back for the output Hadamard, the second chunk's partial sums read and written), about
// 15 µs, which pays for an original-basis decode up to ~25% slower than the inner-basis one (~1 ms
// per G weights: 59 µs for this weight); the saving grows with the rows, the decode does not.
// ExLlamaV3 switches at 1024 rows. The tiny model's 256-token perplexity windows run through here.
// exl3_decode_gemm_gpu_test's timing printout shows both paths around this value.
constexpr int64_t kDecodeGemmMinRows = 256;

// The staging the slabs are decoded into: slabs of whole 128-column blocks of all (in_features rounded
// up to 128) input rows, as wide as `staging_bytes` allows and of near-equal widths.
struct DecodeGemmStaging {
  cublasHandle_t cublas = nullptr;  // bound to the launch's stream
  __half* staging = nullptr;        // device, staging_bytes
  uint64_t staging_bytes = 0;
};

// y = x · W (+ bias) with W = diag(suh) · BD(H) · Wq · BD(H) · diag(svh) in fp16 (numerics of
// exl3_decode_original_ref.h): x F16 [m, in_features] as is (the GEMM's inner dimension is
// in_features, so the padded inputs in_features..k-1 count as zero), fp32 accumulation, y F16 or F32
// [m, out_features] rounded once. Without a bias cuBLAS writes y; with one, the product goes to y
// (F32) or to p.scratch_c (F16 output: m · out_features floats) and a small epilogue adds the bias.
// Contract (EXL3_CHECK at entry): p as launch_exl3_linear's (m may be any count in 1..INT32_MAX,
// scratch_a is not used); staging non-null, at least round_up(in_features, 128) · 128 halves;
// cublas non-null and bound to `stream`. Asynchronous on `stream`; nothing is allocated.
void launch_exl3_decode_gemm(const Exl3LinearParams& p, const DecodeGemmStaging& staging, cudaStream_t stream);

}  // namespace exl3
