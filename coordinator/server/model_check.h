// The coordinator's check of the model copies its workers loaded: each worker reports its copy's
// fingerprint with the load result (LoadResult.model_files), and one that differs from the
// coordinator's own copy is refused, naming the rank, its host and the file.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/worker.pb.h"
#include "worker/loader/model_fingerprint.h"

namespace exl3 {

// FAILED_PRECONDITION for the first rank whose copy differs from `own`; loads[r] and
// rank_names[r] ("worker rank R on HOST (PEER)", WorkerGroup::rank_names) belong to rank r.
absl::Status check_worker_models(const std::vector<ModelFileFingerprint>& own,
                                 const std::vector<control::v1::CommandResult>& loads,
                                 const std::vector<std::string>& rank_names);

}  // namespace exl3
