// Worker model copies against the coordinator's (model_check.h).
#include "coordinator/server/model_check.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::Status check_worker_models(const std::vector<ModelFileFingerprint>& own,
                                 const std::vector<control::v1::CommandResult>& loads,
                                 const std::vector<std::string>& rank_names) {
  for (size_t r = 0; r < loads.size(); ++r) {
    std::vector<ModelFileFingerprint> theirs;
    for (const control::v1::ModelFile& f : loads[r].load().model_files()) {
      theirs.push_back({f.name(), f.bytes(), f.hash()});
    }
    const std::string diff = fingerprint_difference(own, theirs);
    if (diff.empty()) continue;
    const std::string who = r < rank_names.size() ? rank_names[r] : absl::StrCat("worker rank ", r);
    return absl::FailedPreconditionError(
        absl::StrCat(who, " loaded a model copy that differs from the coordinator's: ", diff));
  }
  return absl::OkStatus();
}

}  // namespace exl3
