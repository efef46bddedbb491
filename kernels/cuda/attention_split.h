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

// The decode splits' target for every block source (F16 pages and quantized caches at every width).
// Against 4096 for F16 pages (session 18, H100, bench/results/2026-12-05-s18/ run 8), the op alone
// at 2048 keys batch 32 143.2 -> 130.8 us, 16 76.6 -> 76.9, 4 23.6 -> 26.9; 8192 keys batch 32
// 543.5 -> 442.4; the 8B with int8 off at 2048-token prompts, two rounds, batch 32 3,204 / 3,181 ->
// 3,656 / 3,677 tokens/s (+15%), 16 +8.3%, 4 -2.2%, 1 even; at 32-token prompts batch 32 +3.0%.
// Each warp walks a KV head's whole group, so 4096 rows gave batch 32 four splits: 1,024 one-warp
// blocks of 512 keys, 1.3 waves at the 6 an SM holds; 16384 gives 4,096 of 128. Quantized caches
// (session 20, bench/results/2026-12-05-s20/ runs 2-3, the op alone at exactly 2048 keys): 8-bit
// batch 32 257.0 -> 211.6 us, 2-bit 169.6 -> 149.6, K8/V4 233.3 -> 184.8; 4/4 lost there (143.4 ->
// 147.7) but gains in the model (session 21, bench/results/2026-12-05-s21/ run 3, 8B int8 off, two
// rounds), where a step graph plans for its page bucket (2,082 keys plan as 4,096) and 4096 rows
// gave a token two of four 1,024-key splits: at 2048-token prompts batch 4 / 16 / 32 / 64 808 /
// 1,847 / 2,302 / 2,552 -> 891 / 2,367 / 3,201 / 3,632 tokens/s, at 512-token prompts batch 32 /
// 64 +10% / +16%, batch 1 even.
inline constexpr int64_t kSplitTargetRows = kMaxSplitTargetRows;

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
