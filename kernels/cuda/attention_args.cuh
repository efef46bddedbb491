// The kernel arguments of paged attention, shared by the F16 path (attention.cu), the quantized
// path (attention_quant.cu) and the split-K merge (attention_split.h): the batch, the two cache
// sides, the split plan, and the per-token questions every kernel asks of them (is the token its
// sequence's only one in the batch, where does its sliding window start, is its metadata sound).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_split.h"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3::attention_detail {

constexpr float kLog2e = 1.4426950408889634f;

struct AttnArgs {
  const __half* q;
  __half* out;
  ConstKvSide k, v;
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* page_table;
  float* scratch;  // split-K partials, attention_split.h
  int64_t tokens, num_seqs, max_pages, num_pages, heads, kv_heads, group;
  int32_t page_size, max_position;
  int32_t window;  // 0: full causal
  float scale_log2;
  int32_t splits, chunk;  // decode: keys [s · chunk, (s + 1) · chunk) go to split s
};

inline AttnArgs make_attn_args(const AttentionParams& p, const attention_split::SplitPlan& plan) {
  const PagedBatch& b = p.batch;
  return AttnArgs{p.q,
                  p.out,
                  ConstKvSide{p.k_pages, p.k_words, p.k_scales, p.k_bits},
                  ConstKvSide{p.v_pages, p.v_words, p.v_scales, p.v_bits},
                  b.positions,
                  b.token_seq,
                  b.page_table,
                  p.scratch,
                  b.tokens,
                  b.num_seqs,
                  b.max_pages,
                  p.num_pages,
                  p.heads,
                  p.kv_heads,
                  p.heads / p.kv_heads,
                  static_cast<int32_t>(b.page_size),
                  b.max_position,
                  static_cast<int32_t>(p.window),
                  p.scale * kLog2e,
                  static_cast<int32_t>(plan.splits),
                  static_cast<int32_t>(plan.chunk)};
}

// First key position a token at `pos` sees.
__device__ __forceinline__ int32_t window_start(const AttnArgs& a, int32_t pos) {
  return a.window > 0 ? max(0, pos - a.window + 1) : 0;
}

// A token whose neighbours in the batch belong to other sequences: the decode kernel's.
__device__ __forceinline__ bool is_single(const AttnArgs& a, int64_t t) {
  const int32_t seq = a.token_seq[t];
  return (t == 0 || a.token_seq[t - 1] != seq) && (t + 1 == a.tokens || a.token_seq[t + 1] != seq);
}

// The token's position after checking its metadata against the batch (violations trap).
__device__ __forceinline__ int32_t checked_position(const AttnArgs& a, int64_t t) {
  const int32_t seq = a.token_seq[t];
  const int32_t pos = a.positions[t];
  if (seq < 0 || seq >= a.num_seqs || pos < 0 || pos > a.max_position || pos / a.page_size >= a.max_pages) {
    __trap();
  }
  return pos;
}

}  // namespace exl3::attention_detail
