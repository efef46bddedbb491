// What GPUs exl3-launch can hand to workers: the --gpus list parser, the count of visible GPUs
// (through the CUDA runtime, in builds with CUDA only; a CPU-only build says so instead of
// guessing), and the CUDA_VISIBLE_DEVICES value that gives a worker exactly one of them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace exl3 {

struct GpuProbe {
  bool built_with_cuda = false;  // this exl3-launch was built with CUDA
  int count = 0;                 // GPUs visible to this process (0 when none or not built with CUDA)
  std::string error;             // why none are visible, when the runtime said so
};
GpuProbe probe_gpus();

// "0,1" -> {0, 1}: non-negative, distinct indices (INVALID_ARGUMENT naming the bad entry).
absl::StatusOr<std::vector<int>> parse_gpu_list(const std::string& text);

// CUDA_VISIBLE_DEVICES for a worker that gets GPU `index` as this process numbers it: entry
// `index` of the launcher's own CUDA_VISIBLE_DEVICES (`visible`, nullopt when unset) when it has
// one, else the index itself.
std::string child_visible_devices(int index, const std::optional<std::string>& visible);

}  // namespace exl3
