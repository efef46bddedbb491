// Split-K of decode attention, shared by the F16 path (attention.cu) and the quantized path
// (attention_quant.cu): how a decode token's keys are cut into splits, and the merge kernel that
// combines the splits' partial softmax states. Both paths write the same scratch layout: for slot
// (t · heads + h) · splits + s, a (max, sum) float pair at [2 · slot] (max in the log2 domain,
// scores · scale · log2 e) and the unnormalised output at [2 · tokens · heads · splits + slot · D].
// A split writes its slot only when it holds part of the token's context (s · chunk <= pos and
// s >= window_start / chunk); the merge reads exactly those.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention_scratch.h"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3::attention_split {

struct SplitPlan {
  int64_t splits;
  int64_t chunk;  // keys [s · chunk, (s + 1) · chunk) go to split s; a multiple of 32
};

// The largest target_rows plan_splits takes (attention_scratch_floats holds the partials of it).
using attention_scratch::kMaxSplitTargetRows;

// Splits for a batch of `tokens` tokens of `heads` heads whose largest position is max_position:
// while tokens · heads < target_rows (at most kMaxSplitTargetRows), about target_rows (token, head,
// split) rows, at most 64 splits per token, each of at least min_keys_per_split keys (a multiple of
// 32). tokens · heads · splits stays within attention_scratch_floats(tokens, heads, D) / (D + 2)
// for every such plan.
SplitPlan plan_splits(int64_t tokens, int64_t heads, int32_t max_position, int64_t min_keys_per_split,
                      int64_t target_rows);

// Checks that p's scratch holds the plan's partials (splits > 1 only); `who` names the caller.
void check_split_scratch(const AttentionParams& p, const SplitPlan& plan, const char* who);

// One block of head_dim threads per (token, head) of the tokens that are their sequence's only one
// in the batch: out = Σ_s w_s · acc_s / Σ_s w_s · l_s with w_s = exp2(m_s - max m) over the splits
// that hold part of the context. Only for plan.splits > 1, after the partials were written.
void launch_attention_merge(const AttentionParams& p, const SplitPlan& plan, cudaStream_t stream);

}  // namespace exl3::attention_split
