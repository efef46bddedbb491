// RankPlan -> ShardPlan conversion.
#include "coordinator/server/plan_proto.h"

namespace exl3 {

control::v1::ShardPlan plan_to_proto(const RankPlan& p) {
  control::v1::ShardPlan s;
  s.set_mode(plan_mode_name(p.mode));
  s.set_rank(p.rank);
  s.set_world_size(p.world_size);
  s.set_first_layer(static_cast<int32_t>(p.first_layer));
  s.set_end_layer(static_cast<int32_t>(p.end_layer));
  for (const LayerPlan& l : p.layers) {
    control::v1::LayerShard* ls = s.add_layers();
    ls->set_layer(static_cast<int32_t>(l.layer));
    ls->set_kv_head_begin(static_cast<int32_t>(l.kv_head_begin));
    ls->set_kv_head_end(static_cast<int32_t>(l.kv_head_end));
    ls->set_mlp_begin(static_cast<int32_t>(l.mlp_begin));
    ls->set_mlp_end(static_cast<int32_t>(l.mlp_end));
  }
  s.set_vocab_begin(static_cast<int32_t>(p.vocab_begin));
  s.set_vocab_end(static_cast<int32_t>(p.vocab_end));
  s.set_has_embedding(p.has_embedding);
  s.set_has_head(p.has_head);
  s.set_weight_bytes(static_cast<int64_t>(p.weight_bytes));
  s.set_cache_bytes(static_cast<int64_t>(p.cache_bytes));
  s.set_workspace_bytes(static_cast<int64_t>(p.workspace_bytes));
  return s;
}

}  // namespace exl3
