// Worker model copies against the coordinator's (model_check.h).
#include "coordinator/server/model_check.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::Status check_worker_models(const std::vector<ModelFileFingerprint>& own,
                                 const std::vector<control::v1::CommandResult>& loads,
                                 const std::vector<control::v1::RegisterRequest>& registrations) {
  for (size_t r = 0; r < loads.size(); ++r) {
    std::vector<ModelFileFingerprint> theirs;
    for (const control::v1::ModelFile& f : loads[r].load().model_files()) {
      theirs.push_back({f.name(), f.bytes(), f.hash()});
    }
    const std::string diff = fingerprint_difference(own, theirs);
    if (diff.empty()) continue;
    const std::string host = r < registrations.size() && !registrations[r].hostname().empty()
                                 ? registrations[r].hostname()
                                 : std::string("an unknown host");
    return absl::FailedPreconditionError(absl::StrCat("worker rank ", r, " on ", host,
                                                      " loaded a model copy that differs from the coordinator's: ", diff));
  }
  return absl::OkStatus();
}

}  // namespace exl3
