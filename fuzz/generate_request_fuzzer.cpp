// libFuzzer target: request admission. The input is a serialized exl3.v1.GenerateRequest (as a
// client sends it); a request that parses goes through admit_request (request_admission.h), the
// path InferenceService::run takes before the serving loop: size limits, conversion, tokenizing
// (BOS), the prompt-token limit, the --max-new-tokens default, validate_request. A request that is
// admitted must meet the server's limits and the invariants the scheduler relies on (request.h);
// a refusal is INVALID_ARGUMENT with a message.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "coordinator/scheduler/request.h"
#include "coordinator/server/request_admission.h"
#include "coordinator/server/request_limits.h"
#include "fuzz/fuzz_util.h"
#include "proto/inference.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const exl3::Tokenizer tokenizer = exl3::fuzz::load_tokenizer(exl3::fuzz::tokenizer_paths().front());
  static const exl3::ModelLimits limits = [] {
    exl3::ModelLimits l;
    l.vocab_size = tokenizer.vocab_size();
    l.max_context = 96;
    l.eos_token_ids = {1};
    return l;
  }();

  // Small limits, so that fuzzed requests reach them.
  static const exl3::RequestLimits request_limits = [] {
    exl3::RequestLimits l;
    l.max_stop_strings = 4;
    l.max_stop_string_bytes = 64;
    l.max_prompt_bytes = 256;
    l.max_new_tokens = 48;
    l.max_request_id_bytes = 16;
    absl::StatusOr<exl3::RequestLimits> resolved = exl3::resolve_request_limits(l, limits.max_context);
    if (!resolved.ok()) std::abort();
    return *resolved;
  }();

  exl3::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto refused = [](const absl::Status& s) {
    if (s.code() != absl::StatusCode::kInvalidArgument || s.message().empty()) std::abort();
    return 0;
  };
  absl::StatusOr<exl3::ValidatedRequest> v =
      exl3::admit_request(request, tokenizer, limits, request_limits, "req-fuzz", 12345);
  if (!v.ok()) return refused(v.status());
  // The server's limits.
  if (v->request_id.size() > static_cast<size_t>(request_limits.max_request_id_bytes)) std::abort();
  if (v->stop_strings.size() > static_cast<size_t>(request_limits.max_stop_strings)) std::abort();
  size_t stop_bytes = 0;
  for (const std::string& s : v->stop_strings) stop_bytes += s.size();
  if (stop_bytes > static_cast<size_t>(request_limits.max_stop_string_bytes)) std::abort();
  if (v->max_new_tokens > request_limits.max_new_tokens) std::abort();
  if (v->prompt_ids.size() > static_cast<size_t>(request_limits.max_prompt_tokens)) std::abort();
  if (request.prompt().size() > static_cast<size_t>(request_limits.max_prompt_bytes)) std::abort();
  // The invariants the scheduler relies on (request.h).
  if (v->prompt_ids.empty() || v->max_new_tokens < 1) std::abort();
  if (static_cast<int64_t>(v->prompt_ids.size()) + v->max_new_tokens > limits.max_context) std::abort();
  for (int32_t id : v->prompt_ids) {
    if (id < 0 || id >= limits.vocab_size) std::abort();
  }
  if (!std::is_sorted(v->stop_token_ids.begin(), v->stop_token_ids.end()) ||
      std::adjacent_find(v->stop_token_ids.begin(), v->stop_token_ids.end()) != v->stop_token_ids.end()) {
    std::abort();
  }
  for (int32_t id : v->stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) std::abort();
  }
  for (const std::string& s : v->stop_strings) {
    if (s.empty()) std::abort();
  }
  if (!(v->sampling.temperature >= 0 && v->sampling.top_p > 0 && v->sampling.top_p <= 1)) std::abort();
  if (v->sampling.top_k < 0 || v->sampling.top_k > limits.vocab_size) std::abort();
  if (request.stopping().ignore_eos() != v->eos_token_ids.empty()) std::abort();
  return 0;
}
