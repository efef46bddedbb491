// The worker-side ModelShard of a planned rank, for processes that plan and run their shards
// themselves (exl3-bench model with several ranks); workers get theirs from LoadShard instead.
#pragma once

#include "coordinator/planner/shard_planner.h"
#include "worker/model/model_shard.h"

namespace exl3 {

// The ranges, layers and parts `plan` holds, as LlamaModel::load_shard takes them.
ModelShard model_shard_of(const RankPlan& plan);

}  // namespace exl3
