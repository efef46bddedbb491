// GPU discovery for exl3-launch (EXL3_LAUNCH_CUDA builds ask the CUDA runtime; no context is
// created for counting) and the --gpus list.
#include "launch/gpu_probe.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#if EXL3_LAUNCH_CUDA
#include <cuda_runtime.h>
#endif

namespace exl3 {

GpuProbe probe_gpus() {
  GpuProbe p;
#if EXL3_LAUNCH_CUDA
  p.built_with_cuda = true;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    p.error = absl::StrCat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
    count = 0;
  }
  p.count = count;
#endif
  return p;
}

absl::StatusOr<std::vector<int>> parse_gpu_list(const std::string& text) {
  std::vector<int> ids;
  std::set<int> seen;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const absl::string_view item = absl::StripAsciiWhitespace(part);
    int id = -1;
    if (!absl::SimpleAtoi(item, &id) || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: \"", item, "\" is not a GPU index (expected non-negative integers, e.g. 0,1)"));
    }
    if (!seen.insert(id).second) return absl::InvalidArgumentError(absl::StrCat("--gpus: GPU ", id, " is listed twice"));
    ids.push_back(id);
  }
  return ids;
}

std::string child_visible_devices(int index, const std::optional<std::string>& visible) {
  if (!visible) return std::to_string(index);
  std::vector<std::string> entries = absl::StrSplit(*visible, ',', absl::SkipWhitespace());
  if (index >= 0 && index < static_cast<int>(entries.size())) {
    return std::string(absl::StripAsciiWhitespace(entries[index]));
  }
  return std::to_string(index);
}

}  // namespace exl3
