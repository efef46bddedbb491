// The CPU references (kernels/ref/, readable loops): the specification every backend op is tested
// against. Production code never calls these: the model calls a Backend (kernels/backend.h), whose
// CPU and CUDA implementations live in kernels/cpu/ and kernels/cuda/ with the same name stems.
// References compute in fp32 on host tensors. Shapes are row-major; "rows" are tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/tensor.h"

namespace exl3 {

// ---- EXL3 (exl3-format.md §3–§6) -------------------------------------------------------------

enum class Codebook : uint8_t { k3Inst = 0, kMcg = 1, kMul1 = 2 };

// fp16 bits of the codebook value for a 16-bit trellis state (§5), bit-exact with ExLlamaV3.
uint16_t exl3_codebook_ref(uint16_t state, Codebook codebook);

// Decodes packed trellis tiles (I16 [k/16, n/16, 16*bits]) into the inner weight Wq
// (F16 [k, n], rows = input features). bits in 1..8. Bit-exact (§4, §6).
Tensor exl3_decode_ref(const Tensor& trellis, int bits, Codebook codebook);
// The 16-bit trellis state of every weight of the same tiles, row-major [k, n] like
// exl3_decode_ref's output (which is the codebook of each state).
std::vector<uint16_t> exl3_decode_states_ref(const Tensor& trellis, int bits);

// In-place 128-point Walsh-Hadamard transform of every consecutive 128-block of each row of a
// row-major [rows, cols] fp32 matrix, scaled by 1/sqrt(128). cols % 128 == 0.
void hadamard128_ref(float* data, int64_t rows, int64_t cols);

// One EXL3 linear as stored: y = x · diag(suh) · BD(H) · Wq · BD(H) · diag(svh) (+ bias).
struct Exl3Weight {
  int64_t k = 0;      // padded input features (multiple of 128)
  int64_t n = 0;      // padded output features (multiple of 128)
  int bits = 0;       // K, 1..8
  Codebook codebook = Codebook::k3Inst;
  Tensor trellis;     // I16 [k/16, n/16, 16*bits]
  Tensor suh;         // F16 [k]
  Tensor svh;         // F16 [n]
};

// The represented weight W (F32 [k, n]) computed in fp32 from the exact formula of §3.
Tensor exl3_dequantize_ref(const Exl3Weight& w);

// Reference forward of §3 step by step: x (F32 [m, k]) -> y (F32 [m, n]), no bias.
Tensor exl3_linear_ref(const Exl3Weight& w, const Tensor& x);

// ---- Dense math (F32) --------------------------------------------------------------------------

// y[m, n] = x[m, k] · w[k, n], a triple loop.
Tensor matmul_ref(const Tensor& x, const Tensor& w);

// y = x · rsqrt(mean(x²) + eps) · weight over the last dimension (size = weight.numel()).
Tensor rms_norm_ref(const Tensor& x, const Tensor& weight, float eps);

// In-place x += y (same shape).
void add_inplace_ref(Tensor& x, const Tensor& y);

// The all-reduce sum of the one-shot kernel (kernels/cuda/oneshot_all_reduce.cu), element by
// element in fp32 with the ranks in order (s = 0; s += parts[0]; s += parts[1]; ...), so that every
// rank gets the same bits: out = s rounded to out's dtype, or with `accumulate` out = out + s
// (one rounding). parts: host F32, F16 or BF16 tensors, one per rank, same dtype and element
// count; out: host, that count, the parts' dtype or F32.
void oneshot_all_reduce_ref(std::span<const Tensor> parts, Tensor& out, bool accumulate);

// Rows of `table` (F32 [vocab, hidden]) for each id; ids are validated by the caller.
Tensor embedding_ref(const Tensor& table, std::span<const int32_t> ids);

// silu(gate) ⊙ up, elementwise, same shapes.
Tensor silu_mul_ref(const Tensor& gate, const Tensor& up);

// Softmax over the last dimension, in place (fp32, max-subtracted).
void softmax_ref(float* data, int64_t rows, int64_t cols);

// NEOX-style rotary embedding in place on x [tokens, heads, head_dim]: the first `rotary_dim`
// dims of each head are split in halves and rotated by angle positions[t] · inv_freq[i];
// cos/sin are multiplied by `attention_scaling` (YaRN's mscale, 1 otherwise).
void rope_ref(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq,
              float attention_scaling);

// KV cache of one layer kept in fixed-size pages. Keys and values are each stored either at full
// precision (bits 16: `*_pages` [num_pages, page_size, kv_heads, head_dim] of the backend's
// kv_dtype; F32 for the references) or quantized as exl3-format.md §9 says (bits 2..8: each token's
// kv_heads·head_dim vector in groups of 32 elements, per group `bits` I32 words of bit planes in
// `*_words` [num_pages, page_size, kv_heads·head_dim/32·bits] and an fp16 scale in `*_scales`
// [num_pages, page_size, kv_heads·head_dim/32]; the unused pages tensor stays undefined).
struct PagedKv {
  Tensor k_pages;
  Tensor v_pages;
  int64_t page_size = 0;
  int64_t kv_heads = 0;  // set for every cache: a quantized one has no pages tensor to read it from
  int64_t head_dim = 0;
  int k_bits = 16;       // 16 = full precision; 2..8 = quantized
  int v_bits = 16;
  Tensor k_words, k_scales;  // I32 / F16 when k_bits < 16
  Tensor v_words, v_scales;  // I32 / F16 when v_bits < 16
  // Sliding-window attention (Mistral's `sliding_window`): 0 = full causal; otherwise a token at
  // position p attends to positions max(0, p - window + 1) .. p only.
  int64_t window = 0;
};

// §9 quantization of one group of 32 values at `bits` (2..8): the `bits` words of its bit planes and
// the fp16 bits of its scale. Bit-exact with ExLlamaV3 for fp16-representable inputs.
void kv_quantize_group_ref(const float* group, int bits, uint32_t* words, uint16_t* scale_fp16);
// The inverse: 32 values, each rounded to fp16 as §9 says.
void kv_dequantize_group_ref(const uint32_t* words, uint16_t scale_fp16, int bits, float* group);

// Writes k/v rows [tokens, kv_heads, head_dim] at the given positions of one sequence whose
// pages are `page_table` (position p lives in page page_table[p / page_size], slot p % page_size).
void kv_write_ref(PagedKv& cache, std::span<const int32_t> page_table, std::span<const int32_t> positions,
                  const Tensor& k, const Tensor& v);

// Causal grouped-query attention of one sequence: q [tokens, heads, head_dim] at `positions`
// attends to cache positions 0..positions[t] (inclusive), or max(0, p - window + 1)..p with a
// window. heads % kv_heads == 0; query head h uses kv head h / (heads / kv_heads). Scale
// 1/sqrt(head_dim). Quantized sides are read through kv_dequantize_group_ref. Returns [tokens,
// heads, head_dim].
Tensor attention_ref(const Tensor& q, const PagedKv& cache, std::span<const int32_t> page_table,
                     std::span<const int32_t> positions);

}  // namespace exl3
