// Admission of one Generate request, before it reaches the serving loop: the size limits on the
// request as sent, the proto turned into GenerateParams, the prompt as token ids (text tokenized,
// BOS per add_bos), the prompt-token limit, the --max-new-tokens default, then validate_request.
// Kept apart from the gRPC handler so that the fuzzer (fuzz/generate_request_fuzzer.cpp) runs
// exactly this path.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/scheduler/request.h"
#include "coordinator/server/request_limits.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "proto/inference.pb.h"

namespace exl3 {

// The request's fields as GenerateParams (no defaults applied: validate_request does that).
GenerateParams params_from_proto(const v1::GenerateRequest& request);

// The validated request, or INVALID_ARGUMENT naming the field and the limit. A request without
// request_id gets `default_request_id`; `random_seed` seeds sampling when the request sets none.
absl::StatusOr<ValidatedRequest> admit_request(const v1::GenerateRequest& request, const Tokenizer& tokenizer,
                                               const ModelLimits& limits, const RequestLimits& request_limits,
                                               const std::string& default_request_id, uint64_t random_seed);

}  // namespace exl3
