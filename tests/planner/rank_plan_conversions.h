// Test helpers over the planner's RankPlan: the worker-side ModelShard it describes (the product
// goes through the control-plane proto instead), and the widest parts the rank holds.
#pragma once

#include <algorithm>

#include "coordinator/planner/model_footprint.h"
#include "coordinator/planner/shard_planner.h"
#include "worker/model/model_shard.h"

namespace exl3::testing {

inline ModelShard to_shard(const RankPlan& p) {
  ModelShard s;
  s.mode = p.mode == PlanMode::kTensorParallel ? ShardMode::kTensorParallel : ShardMode::kLayers;
  s.rank = p.rank;
  s.world_size = p.world_size;
  s.first_layer = p.first_layer;
  s.end_layer = p.end_layer;
  for (const LayerPlan& l : p.layers) s.layers.push_back({l.kv_head_begin, l.kv_head_end, l.mlp_begin, l.mlp_end});
  s.vocab_begin = p.vocab_begin;
  s.vocab_end = p.vocab_end;
  s.has_embedding = p.has_embedding;
  s.has_head = p.has_head;
  return s;
}

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
