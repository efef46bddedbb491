// The shard plan as a table for people (exl3-launch --plan-only, and start-up logs): one row per
// rank with its layers, query and KV heads, MLP columns, vocabulary rows and the bytes it will
// allocate against its cap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/planner/model_footprint.h"
#include "coordinator/planner/shard_planner.h"

namespace exl3 {

// A header (mode, backend, model shape, units, the KV cache (kv_cache_summary with `options`), where
// the embedding lives), the per-rank table
// and the footprint's notes. Ranges are inclusive ("0-3" = 4 items). When a rank's range differs
// between layers the cell lists each run of layers, e.g. "0-1 (layers 0-27)" then
// "0-2 (layers 28-31)" on the next line. Bytes are in GiB (MiB below 1 GiB) with two decimals.
// `caps` has one entry per plan (the same caps the plan was made with). With `options` (the ones
// the plan was made with) a CUDA plan also breaks its "workspace" column down (forward workspace,
// scratch, cuBLAS workspace, CUDA context, NCCL buffers).
std::string format_plan_table(const ModelFootprint& footprint, const std::vector<RankPlan>& plans,
                              const std::vector<uint64_t>& caps, const PlannerOptions* options = nullptr);

}  // namespace exl3
