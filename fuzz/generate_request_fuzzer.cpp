// libFuzzer target: request admission. The input is a serialized exl3.v1.GenerateRequest (as a
// client sends it); a request that parses goes through the steps of InferenceService::run before
// the serving loop: check_request_size, conversion, tokenizing (BOS), check_prompt_tokens, the
// --max-new-tokens default, validate_request. A request that is admitted must meet the server's
// limits and the invariants the scheduler relies on (request.h); a refusal is INVALID_ARGUMENT.
//
// The steps between the real checks (proto to GenerateParams, the prompt ids, the default) are
// file-local to inference_service.cpp, so they are mirrored here; the checks are the real ones.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "coordinator/scheduler/request.h"
#include "coordinator/server/request_limits.h"
#include "fuzz/fuzz_util.h"
#include "proto/inference.pb.h"

namespace {

exl3::GenerateParams params_of(const exl3::v1::GenerateRequest& r) {
  exl3::GenerateParams p;
  p.request_id = r.request_id();
  if (r.input_case() == exl3::v1::GenerateRequest::kPrompt) {
    p.prompt = r.prompt();
  } else if (r.input_case() == exl3::v1::GenerateRequest::kPromptTokens) {
    p.prompt = std::vector<int32_t>(r.prompt_tokens().ids().begin(), r.prompt_tokens().ids().end());
  }
  if (r.has_add_bos()) p.add_bos = r.add_bos();
  p.special_tokens_as_text = r.special_tokens_as_text();
  const exl3::v1::SamplingParams& s = r.sampling();
  if (s.has_temperature()) p.sampling.temperature = s.temperature();
  if (s.has_top_k()) p.sampling.top_k = s.top_k();
  if (s.has_top_p()) p.sampling.top_p = s.top_p();
  if (s.has_min_p()) p.sampling.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.sampling.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.sampling.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.sampling.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.sampling.seed = s.seed();
  const exl3::v1::StoppingCriteria& st = r.stopping();
  if (st.has_max_new_tokens()) p.stopping.max_new_tokens = st.max_new_tokens();
  p.stopping.stop_strings.assign(st.stop_strings().begin(), st.stop_strings().end());
  p.stopping.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  p.stopping.ignore_eos = st.ignore_eos();
  p.skip_special_tokens = r.skip_special_tokens();
  return p;
}

}  // namespace

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
  if (absl::Status s = exl3::check_request_size(request, request_limits); !s.ok()) return refused(s);
  exl3::GenerateParams params = params_of(request);

  // The prompt as InferenceService::run builds it. The tokenizer (the test model's, first in
  // EXL3_FUZZ_TOKENIZERS) has no BOS id of its own, so id 0, the model's "<s>", stands in for it.
  std::vector<int32_t> body;
  bool default_bos = false;
  if (const auto* text = std::get_if<std::string>(&params.prompt)) {
    body = tokenizer.encode(*text, !params.special_tokens_as_text);
    default_bos = true;
  } else if (const auto* ids = std::get_if<std::vector<int32_t>>(&params.prompt)) {
    body = *ids;
  }
  std::vector<int32_t> prompt_ids;
  if (!body.empty() && params.add_bos.value_or(default_bos)) prompt_ids.push_back(0);
  prompt_ids.insert(prompt_ids.end(), body.begin(), body.end());
  const char* field = std::holds_alternative<std::string>(params.prompt) ? "prompt" : "prompt_tokens";
  if (absl::Status s = exl3::check_prompt_tokens(static_cast<int64_t>(prompt_ids.size()), field, request_limits);
      !s.ok()) {
    return refused(s);
  }
  const int64_t room = int64_t{limits.max_context} - static_cast<int64_t>(prompt_ids.size());
  if (!params.stopping.max_new_tokens && request_limits.max_new_tokens < room) {
    params.stopping.max_new_tokens = request_limits.max_new_tokens;
  }

  absl::StatusOr<exl3::ValidatedRequest> v = exl3::validate_request(params, limits, prompt_ids, 12345);
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
