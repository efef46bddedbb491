// RankPlan -> ModelShard: the same fields under the worker's names.
#include "coordinator/planner/rank_shard.h"

namespace exl3 {

ModelShard model_shard_of(const RankPlan& plan) {
  ModelShard s;
  s.mode = plan.mode == PlanMode::kLayers ? ShardMode::kLayers : ShardMode::kTensorParallel;
  s.rank = plan.rank;
  s.world_size = plan.world_size;
  s.first_layer = plan.first_layer;
  s.end_layer = plan.end_layer;
  for (const LayerPlan& l : plan.layers) s.layers.push_back({l.kv_head_begin, l.kv_head_end, l.mlp_begin, l.mlp_end});
  s.vocab_begin = plan.vocab_begin;
  s.vocab_end = plan.vocab_end;
  s.has_embedding = plan.has_embedding;
  s.has_head = plan.has_head;
  return s;
}

}  // namespace exl3
