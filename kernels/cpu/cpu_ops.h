// The CPU backend's ops (one .cpp per op, same stems as kernels/ref/ and kernels/cuda/): fp32
// loops and BLAS over raw host buffers. CpuBackend (cpu_backend.cpp) checks shapes and calls
// these; kernels/ref/ is the specification they are tested against.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/ops.h"
#include "kernels/sampling.h"

namespace exl3 {

// y[m, n] = x[m, k] · w[k, n] (BLAS sgemm); k > 0.
void matmul_cpu(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n);
// out[r, :] = x[r, :] · rsqrt(mean(x[r, :]²) + eps) · weight; out may alias x.
void rms_norm_cpu(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps);
// x[i] += y[i].
void add_cpu(float* x, const float* y, int64_t n);
// out[i] = silu(gate[i]) · up[i].
void silu_mul_cpu(const float* gate, const float* up, float* out, int64_t n);
// out[t, :] = table[ids[t], :] for a table of `table_dtype` (F32, F16 or BF16).
void embedding_cpu(const void* table, DType table_dtype, const int32_t* ids, float* out, int64_t n, int64_t dim);
// NEOX rotary embedding in place on x [tokens, heads, head_dim] (contract of rope_ref).
void rope_cpu(float* x, const int32_t* positions, const float* inv_freq, int64_t tokens, int64_t heads,
              int64_t head_dim, int64_t half_rotary, float attention_scaling);
// out[i, :] = x[rows[i], :] with row_bytes bytes per row.
void gather_rows_cpu(const void* x, const int32_t* rows, void* out, int64_t num_rows, int64_t row_bytes);

// dst[i, column : column + src_cols] = src[i, :] for `rows` rows of elem_bytes-sized elements.
void copy_columns_cpu(const void* src, void* dst, int64_t rows, int64_t src_cols, int64_t dst_cols, int64_t column,
                      int64_t elem_bytes);
// One token drawn as sample_ref draws it (kernels/sampling.h): the inverse CDF of
// sampling_distribution() at philox_uniform(seed, position, kSampleStream); temperature 0 the argmax.
int32_t sample_cpu(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt_ids,
                   std::span<const int32_t> output_ids, int64_t position);

// Batched paged-cache metadata on the host (see StepMeta in kernels/backend.h).
struct CpuPagedBatch {
  const int32_t* positions = nullptr;
  const int32_t* token_seq = nullptr;
  const int32_t* page_table = nullptr;  // [num_seqs, max_pages]
  int64_t tokens = 0, num_seqs = 0, max_pages = 0;
};
// §9 quantization of `groups` consecutive 32-element groups of `row` at `bits` (2..8): `bits` words
// and one fp16 scale per group; bit-equal to kv_quantize_group_ref.
void kv_quantize_row_cpu(const float* row, int64_t groups, int bits, uint32_t* words, uint16_t* scales);
// The inverse for `groups` groups: 32 fp16-rounded values each; bit-equal to kv_dequantize_group_ref.
void kv_dequantize_cpu(const uint32_t* words, const uint16_t* scales, int bits, int64_t groups, float* out);
// kv_write_ref for every token of the batch (full-precision sides copied, quantized ones quantized).
void kv_write_cpu(PagedKv& cache, const float* k, const float* v, const CpuPagedBatch& batch);
// attention_ref for every token of the batch (BLAS per sequence and KV head over the keys the
// sequence's tokens can see, quantized rows dequantized as they are gathered); q, out [tokens,
// heads, head_dim].
void attention_cpu(const float* q, const PagedKv& cache, const CpuPagedBatch& batch, int64_t heads, float* out);

// The represented EXL3 weight W (F32 [k, n]) of exl3-format.md §3, computed in fp32 at load.
Tensor exl3_dequantize_cpu(const Exl3Weight& w);
// The inner weight Wq (F32 [k, n]): the trellis decoded, each value the fp16 of exl3_decode_ref.
Tensor exl3_decode_inner_cpu(const Exl3Weight& w);
// Unnormalised 128-point Walsh-Hadamard transform of every 128-block of each row of m [rows, cols].
void wht128_rows_cpu(float* m, int64_t rows, int64_t cols);

// An EXL3 linear through its decoded inner weight: a = had128(x ⊙ suh) / sqrt(128) with x
// zero-padded to k inputs; with int8_activations the product x ⊙ suh and a are rounded to fp16 and
// a is replaced by its int8 quantize-dequantize (int8_quantize_dequantize_ref); then c = a · Wq
// (BLAS), y = (had128(c) / sqrt(128) ⊙ svh)[:, :out_features] (+ bias). x [m, in_features], wq F32
// [k, n], suh F16 bits [k], svh F16 bits [n], bias F32 [out_features] or null, y [m, out_features].
void exl3_inner_linear_cpu(const float* x, int64_t m, int64_t in_features, const float* wq, int64_t k, int64_t n,
                           const uint16_t* suh, const uint16_t* svh, const float* bias, int64_t out_features,
                           bool int8_activations, float* y);

}  // namespace exl3
