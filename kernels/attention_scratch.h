// The size of decode attention's split-K scratch: the most splits one token takes, the largest
// (token, head, split) rows target a split plan may aim at, and the floats of scratch that hold
// every such plan's partials. One definition for the kernels that plan the splits
// (kernels/cuda/attention.cu, attention_split.h), the CUDA backend that reserves the scratch
// (kernels/cuda/cuda_backend.cpp) and the planner that prices it (coordinator/planner/
// model_footprint.cpp), so the three cannot disagree. CUDA-free.
#pragma once

#include <algorithm>
#include <cstdint>

namespace exl3::attention_scratch {

inline constexpr int64_t kMaxSplits = 64;               // splits of one decode token
inline constexpr int64_t kMaxSplitTargetRows = 16384;  // the largest target_rows plan_splits takes
inline constexpr int64_t kMaxHeadDim = 128;            // the widest head the kernels run

// Floats for the partials of up to `tokens` tokens of `heads` heads of `head_dim`, a bound
// independent of the context length: splits happen only while tokens · heads < the target, and
// then tokens · heads · splits < target + tokens · heads < 2 · kMaxSplitTargetRows rows of
// head_dim + 2 floats.
constexpr int64_t floats(int64_t tokens, int64_t heads, int64_t head_dim) {
  return std::min(tokens * heads * kMaxSplits, 2 * kMaxSplitTargetRows) * (head_dim + 2);
}

// What a backend reserves for steps of up to `rows` tokens through linears of up to `features`
// padded features: heads · head_dim is at most features and head_dim 64..kMaxHeadDim, so
// (rows, features / 64, kMaxHeadDim) bounds every attention of such a step.
constexpr int64_t reserve_floats(int64_t rows, int64_t features) {
  return floats(rows, std::max<int64_t>(1, features / 64), kMaxHeadDim);
}

}  // namespace exl3::attention_scratch
