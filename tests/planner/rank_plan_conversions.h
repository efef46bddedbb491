// Test helpers over the planner's RankPlan: the widest parts the rank holds (its ModelShard is
// model_shard_of, coordinator/planner/rank_shard.h).
#pragma once

#include <algorithm>

#include "coordinator/planner/model_footprint.h"
#include "coordinator/planner/rank_shard.h"
#include "coordinator/planner/shard_planner.h"

namespace exl3::testing {

inline RankShape shape_of(const RankPlan& p) {
  RankShape r;
  for (const LayerPlan& l : p.layers) {
    r.kv_heads = std::max(r.kv_heads, l.kv_head_end - l.kv_head_begin);
    r.mlp_columns = std::max(r.mlp_columns, l.mlp_end - l.mlp_begin);
  }
  r.has_head = p.has_head;
  r.vocab_rows = p.has_head ? p.vocab_end - p.vocab_begin : 0;
  r.gathers_logits = p.mode == PlanMode::kTensorParallel && p.world_size > 1 && p.has_head;
  r.world_size = p.world_size;
  return r;
}

}  // namespace exl3::testing
