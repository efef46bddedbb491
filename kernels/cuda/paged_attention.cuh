// CUDA paged KV cache write and causal grouped-query attention over a batch of sequences: the
// device twins of kv_write_ref and attention_ref (kernels/ref/), batched through per-token
// metadata (kernels/backend.h StepMeta). Each of K and V is stored either as F16 pages [num_pages,
// page_size, kv_heads, head_dim] (bits 16) or quantized (bits 2..8, exl3-format.md §9): I32 words
// [num_pages, page_size, kv_heads·head_dim/32·bits] and F16 scales [num_pages, page_size,
// kv_heads·head_dim/32]. Activations F16; softmax and accumulation in fp32.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace exl3 {

// Per-token batch metadata on the device (I32): positions [tokens], token_seq [tokens] (the
// token's sequence, 0..num_seqs-1), page_table [num_seqs, max_pages].
struct PagedBatch {
  const int32_t* positions = nullptr;
  const int32_t* token_seq = nullptr;
  const int32_t* page_table = nullptr;
  int64_t tokens = 0, num_seqs = 0, max_pages = 0, page_size = 0;
  int32_t max_position = 0;  // largest position in the batch (bounds the key loop)
};

// One side (K or V) of a layer's cache: `pages` at bits 16, `words` and `scales` at bits 2..8.
template <typename Half, typename Word>
struct KvSideT {
  Half* pages = nullptr;
  Word* words = nullptr;
  Half* scales = nullptr;
  int bits = 16;
};
using KvSide = KvSideT<__half, uint32_t>;
using ConstKvSide = KvSideT<const __half, const uint32_t>;

// kv_write_ref for every token: k, v F16 [tokens, kv_heads, head_dim] written at position
// positions[t] of sequence token_seq[t]: page page_table[seq][pos / page_size], slot pos % page_size;
// copied into F16 pages, or quantized per 32-element group (a warp per group) when the side's bits
// are 2..8 (k_bits/v_bits with k_words/k_scales, v_words/v_scales instead of k_pages/v_pages).
struct KvWriteParams {
  const __half* k = nullptr;
  const __half* v = nullptr;
  __half* k_pages = nullptr;
  __half* v_pages = nullptr;
  int64_t kv_heads = 0, head_dim = 0, num_pages = 0;
  PagedBatch batch;
  int k_bits = 16, v_bits = 16;
  uint32_t* k_words = nullptr;
  __half* k_scales = nullptr;
  uint32_t* v_words = nullptr;
  __half* v_scales = nullptr;
};
void launch_kv_write(const KvWriteParams& p, cudaStream_t stream);

// launch_rope on q and on k, then launch_kv_write of the rotated k and v, in one launch
// (rope_kv_write.cu): q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] rotated in
// place (NEOX, rotary_dim <= head_dim), k and v written to their cache slots. F16 pages only (the
// backend composes rope and launch_kv_write for a quantized cache).
struct RopeKvWriteParams {
  __half* q = nullptr;
  __half* k = nullptr;
  const __half* v = nullptr;
  __half* k_pages = nullptr;
  __half* v_pages = nullptr;
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  float attention_scaling = 1.0f;
  int64_t heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0, num_pages = 0;
  PagedBatch batch;
};
void launch_rope_kv_write(const RopeKvWriteParams& p, cudaStream_t stream);

// attention_ref for every token: q F16 [tokens, heads, head_dim] at positions[t] attends to
// positions 0..positions[t] of its sequence, or max(0, p - window + 1)..p with window > 0; query
// head h reads KV head h / (heads / kv_heads); out F16 [tokens, heads, head_dim]; scale =
// 1/sqrt(head_dim). Contract: heads % kv_heads == 0, head_dim in {64, 128} (others refused by
// name), positions within the page table.
// F16 pages on both sides (attention.cu): decode (one token per sequence) splits long contexts
// over pages (split-K) and merges the partial softmax; prefill runs a causal flash-attention loop
// over key blocks. A quantized side (attention_quant.cu): the same scheme (split-K decode, the same
// scratch and merge), each block of keys dequantized into shared memory before the math.
struct AttentionParams {
  const __half* q = nullptr;
  const __half* k_pages = nullptr;
  const __half* v_pages = nullptr;
  __half* out = nullptr;
  int64_t heads = 0, kv_heads = 0, head_dim = 0, num_pages = 0;
  float scale = 0.0f;
  PagedBatch batch;
  float* scratch = nullptr;          // split-K partials, see attention_scratch_floats
  int64_t scratch_floats = 0;
  int64_t window = 0;                // 0: full causal
  int k_bits = 16, v_bits = 16;      // 2..8: the side is read from words/scales instead of pages
  const uint32_t* k_words = nullptr;
  const __half* k_scales = nullptr;
  const uint32_t* v_words = nullptr;
  const __half* v_scales = nullptr;
};
// Floats of scratch launch_attention needs for up to `tokens` tokens of `heads` heads (a bound
// independent of the context length: the number of splits per token is capped).
int64_t attention_scratch_floats(int64_t tokens, int64_t heads, int64_t head_dim);
void launch_attention(const AttentionParams& p, cudaStream_t stream);
// The quantized path (attention_quant.cu), which launch_attention takes when k_bits or v_bits is
// below 16; same contract (scratch included), plus words 16-byte and scales 8-byte aligned.
void launch_attention_quant(const AttentionParams& p, cudaStream_t stream);

}  // namespace exl3
