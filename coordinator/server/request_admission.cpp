// Admission of Generate requests (request_admission.h).
#include "coordinator/server/request_admission.h"

#include <algorithm>
#include <string>
#include <variant>
#include <vector>

namespace exl3 {

GenerateParams params_from_proto(const v1::GenerateRequest& r) {
  GenerateParams p;
  p.request_id = r.request_id();
  if (r.input_case() == v1::GenerateRequest::kPrompt) {
    p.prompt = r.prompt();
  } else if (r.input_case() == v1::GenerateRequest::kPromptTokens) {
    p.prompt = std::vector<int32_t>(r.prompt_tokens().ids().begin(), r.prompt_tokens().ids().end());
  }
  if (r.has_add_bos()) p.add_bos = r.add_bos();
  p.special_tokens_as_text = r.special_tokens_as_text();
  const v1::SamplingParams& s = r.sampling();
  if (s.has_temperature()) p.sampling.temperature = s.temperature();
  if (s.has_top_k()) p.sampling.top_k = s.top_k();
  if (s.has_top_p()) p.sampling.top_p = s.top_p();
  if (s.has_min_p()) p.sampling.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.sampling.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.sampling.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.sampling.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.sampling.seed = s.seed();
  for (const auto& [id, bias] : s.logit_bias()) p.sampling.logit_bias.push_back({id, bias});
  p.sampling.banned_token_ids.assign(s.banned_token_ids().begin(), s.banned_token_ids().end());
  if (s.has_dry_multiplier()) p.sampling.dry_multiplier = s.dry_multiplier();
  if (s.has_dry_base()) p.sampling.dry_base = s.dry_base();
  if (s.has_dry_allowed_length()) p.sampling.dry_allowed_length = s.dry_allowed_length();
  if (s.has_dry_range()) p.sampling.dry_range = s.dry_range();
  if (s.has_dry_sequence_breakers()) {
    p.sampling.dry_sequence_breakers.emplace(s.dry_sequence_breakers().strings().begin(),
                                             s.dry_sequence_breakers().strings().end());
  }
  if (s.has_typical_p()) p.sampling.typical_p = s.typical_p();
  if (s.has_xtc_threshold()) p.sampling.xtc_threshold = s.xtc_threshold();
  if (s.has_xtc_probability()) p.sampling.xtc_probability = s.xtc_probability();
  if (s.has_temperature_last()) p.sampling.temperature_last = s.temperature_last();
  if (s.has_logprobs()) p.sampling.logprobs = s.logprobs();
  p.sampling.banned_strings.assign(s.banned_strings().begin(), s.banned_strings().end());
  const v1::StoppingCriteria& st = r.stopping();
  if (st.has_max_new_tokens()) p.stopping.max_new_tokens = st.max_new_tokens();
  p.stopping.stop_strings.assign(st.stop_strings().begin(), st.stop_strings().end());
  p.stopping.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  p.stopping.ignore_eos = st.ignore_eos();
  p.skip_special_tokens = r.skip_special_tokens();
  return p;
}

absl::StatusOr<ValidatedRequest> admit_request(const v1::GenerateRequest& request, const Tokenizer& tokenizer,
                                               const ModelLimits& limits, const RequestLimits& request_limits,
                                               const std::string& default_request_id, uint64_t random_seed) {
  if (absl::Status size = check_request_size(request, request_limits); !size.ok()) return size;
  GenerateParams params = params_from_proto(request);
  if (params.request_id.empty()) params.request_id = default_request_id;
  // The prompt as token ids: text is tokenized (BOS per add_bos, default the tokenizer's); token
  // prompts are used as given unless add_bos is set explicitly. An empty prompt stays empty so
  // that validation refuses it, BOS or not.
  std::vector<int32_t> body;
  bool default_bos = false;
  if (const auto* text = std::get_if<std::string>(&params.prompt)) {
    body = tokenizer.encode(*text, !params.special_tokens_as_text);
    default_bos = tokenizer.add_bos();
  } else if (const auto* ids = std::get_if<std::vector<int32_t>>(&params.prompt)) {
    body = *ids;
  }
  std::vector<int32_t> prompt_ids;
  prompt_ids.reserve(body.size() + 1);
  if (!body.empty() && params.add_bos.value_or(default_bos) && tokenizer.bos_id()) {
    prompt_ids.push_back(*tokenizer.bos_id());
  }
  prompt_ids.insert(prompt_ids.end(), body.begin(), body.end());
  const char* prompt_field = std::holds_alternative<std::string>(params.prompt) ? "prompt" : "prompt_tokens";
  if (absl::Status n = check_prompt_tokens(static_cast<int64_t>(prompt_ids.size()), prompt_field, request_limits);
      !n.ok()) {
    return n;
  }
  // Unset max_new_tokens means "up to the context"; a lower --max-new-tokens caps that default
  // (the request then finishes with LENGTH at the cap).
  const int64_t room = static_cast<int64_t>(limits.max_context) - static_cast<int64_t>(prompt_ids.size());
  if (!params.stopping.max_new_tokens && request_limits.max_new_tokens < room) {
    params.stopping.max_new_tokens = request_limits.max_new_tokens;
  }
  // DRY's breaker strings as token ids, once per request and only when DRY is on.
  if (params.sampling.dry_multiplier.value_or(0.0f) > 0.0f) {
    const std::vector<std::string>& breakers = dry_sequence_breakers(params.sampling);
    if (breakers.size() <= 64) {  // validate_request refuses more
      params.sampling.dry_breaker_ids =
          dry_breaker_ids(breakers, std::min(tokenizer.vocab_size(), limits.vocab_size),
                          [&](int32_t id) { return tokenizer.token_bytes(id); });
    }
  }
  return validate_request(params, limits, prompt_ids, random_seed);
}

}  // namespace exl3
