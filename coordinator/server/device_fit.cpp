// Plans against the free device memory the CUDA workers registered with (device_fit.h).
#include "coordinator/server/device_fit.h"

#include "absl/strings/str_cat.h"
#include "coordinator/planner/byte_units.h"

namespace exl3 {

absl::Status check_plans_fit_devices(const std::vector<RankPlan>& plans,
                                     const std::vector<control::v1::RegisterRequest>& regs, uint64_t context_bytes) {
  for (size_t r = 0; r < plans.size() && r < regs.size(); ++r) {
    const control::v1::DeviceInfo& device = regs[r].device();
    if (device.backend() != "cuda") continue;
    const RankPlan& p = plans[r];
    const uint64_t total = p.total_bytes();
    const uint64_t needed = total > context_bytes ? total - context_bytes : 0;
    const uint64_t free_bytes = device.free_bytes() > 0 ? static_cast<uint64_t>(device.free_bytes()) : 0;
    if (needed <= free_bytes) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", r, " (", device.name(), " on ", regs[r].hostname(), "): the plan puts ", format_bytes(total),
        " there (weights ", format_bytes(p.weight_bytes), ", KV cache ", format_bytes(p.cache_bytes),
        ", workspace and fixed costs ", format_bytes(p.workspace_bytes), "; ", format_bytes(needed),
        " beyond the CUDA context the worker already holds) but the GPU has ", format_bytes(free_bytes),
        " free: lower its --split cap by at least ", format_bytes(needed - free_bytes),
        ", or leave --split out to plan for each GPU's free memory"));
  }
  return absl::OkStatus();
}

}  // namespace exl3
