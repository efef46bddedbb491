// The planner's RankPlan as the control plane's ShardPlan message (worker.proto).
#pragma once

#include "coordinator/planner/shard_planner.h"
#include "proto/worker.pb.h"

namespace exl3 {

control::v1::ShardPlan plan_to_proto(const RankPlan& plan);

}  // namespace exl3
