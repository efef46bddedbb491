// Before any weight is loaded: does each CUDA worker's device hold what the plan puts there? A
// --split cap above a GPU's free memory lets the planner fit a KV cache the GPU cannot hold, and
// the load would fail only after the weights (minutes for a 70B model). CPU workers are not
// checked here: exl3-launch gives each its cap as its memory, and their backend refuses any
// allocation past it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/planner/shard_planner.h"
#include "proto/worker.pb.h"

namespace exl3 {

// FAILED_PRECONDITION naming the first CUDA rank whose plan needs more than the free memory its
// registration reported (plan total less context_bytes: the worker measured after making its CUDA
// context, which the plan counts too), with its device, host, the plan's parts, the free bytes
// and what to pass instead. plans and regs are in rank order.
absl::Status check_plans_fit_devices(const std::vector<RankPlan>& plans,
                                     const std::vector<control::v1::RegisterRequest>& regs, uint64_t context_bytes);

}  // namespace exl3
