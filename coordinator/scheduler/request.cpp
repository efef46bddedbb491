// Request validation and normalisation (see request.h). Every comparison is written so that NaN
// fails it; every message names the field, its allowed range and the value received.
#include "coordinator/scheduler/request.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The name clients know the prompt by: "prompt" for text, "prompt_tokens" for ids.
std::string prompt_field(const GenerateParams& params) {
  return std::holds_alternative<std::vector<int32_t>>(params.prompt) ? "prompt_tokens" : "prompt";
}

absl::Status validate_prompt(const GenerateParams& params, const ModelLimits& limits,
                             const std::vector<int32_t>& prompt_ids) {
  if (std::holds_alternative<std::monostate>(params.prompt)) {
    return invalid("prompt: one of prompt (text) or prompt_tokens is required");
  }
  if (const auto* text = std::get_if<std::string>(&params.prompt); text != nullptr && text->empty()) {
    return invalid("prompt must not be empty");
  }
  if (const auto* ids = std::get_if<std::vector<int32_t>>(&params.prompt)) {
    EXL3_CHECK(prompt_ids.size() - ids->size() <= 1 && std::equal(ids->rbegin(), ids->rend(), prompt_ids.rbegin()),
               "prompt_ids must be the request's prompt_tokens as given, after BOS when add_bos is set");
  }
  const std::string field = prompt_field(params);
  if (prompt_ids.empty()) {
    return invalid(absl::StrCat(field, " must not be empty (it gave 0 tokens)"));
  }
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    const int32_t id = prompt_ids[i];
    if (id < 0 || id >= limits.vocab_size) {
      return invalid(absl::StrCat(field, ": token id ", id, " at index ", i, " is not in [0, ", limits.vocab_size,
                                  ") (vocab_size ", limits.vocab_size, ")"));
    }
  }
  const int64_t prompt_len = static_cast<int64_t>(prompt_ids.size());
  if (prompt_len >= limits.max_context) {
    return invalid(absl::StrCat(field, " is ", prompt_len, " tokens but the context (max_context) holds ",
                                limits.max_context, " tokens of prompt and output: the prompt may be at most ",
                                limits.max_context - 1, " tokens so that one token can be generated"));
  }
  return absl::OkStatus();
}

// Checks lo <= value <= hi (lo_open / hi_open make that end strict) and writes the range as
// "[lo, hi]" / "(lo, hi]" in the message.
template <typename T>
absl::Status check_range(std::string_view field, T value, T lo, bool lo_open, T hi, bool hi_open,
                         std::string_view meaning) {
  const bool above_lo = lo_open ? value > lo : value >= lo;
  const bool below_hi = hi_open ? value < hi : value <= hi;
  if (above_lo && below_hi) return absl::OkStatus();
  return invalid(absl::StrCat(std::string(field), " must be in ", lo_open ? "(" : "[", lo, ", ", hi,
                              hi_open ? ")" : "]", std::string(meaning), ", got ", value));
}

// logit_bias and banned_token_ids: range-checked, sorted, banned ids deduplicated.
absl::Status apply_token_lists(const RequestSampling& in, int32_t vocab_size, SamplingParams& out) {
  for (const auto& [id, bias] : in.logit_bias) {
    const std::string field = absl::StrCat("sampling.logit_bias[", id, "]");
    if (id < 0 || id >= vocab_size) {
      return invalid(absl::StrCat(field, ": token id ", id, " is not in [0, ", vocab_size, ")"));
    }
    EXL3_RETURN_IF_ERROR(check_range(field, bias, -100.0f, false, 100.0f, false, ""));
    out.logit_bias.push_back({id, bias});
  }
  std::sort(out.logit_bias.begin(), out.logit_bias.end(),
            [](const TokenBias& a, const TokenBias& b) { return a.id < b.id; });
  for (size_t i = 0; i < in.banned_token_ids.size(); ++i) {
    const int32_t id = in.banned_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return invalid(absl::StrCat("sampling.banned_token_ids[", i, "] = ", id, " is not in [0, ", vocab_size, ")"));
    }
  }
  out.banned_ids = in.banned_token_ids;
  std::sort(out.banned_ids.begin(), out.banned_ids.end());
  out.banned_ids.erase(std::unique(out.banned_ids.begin(), out.banned_ids.end()), out.banned_ids.end());
  if (static_cast<int64_t>(out.banned_ids.size()) >= vocab_size) {
    return invalid(absl::StrCat("sampling.banned_token_ids bans all ", vocab_size,
                                " tokens of the vocabulary; at least one must stay allowed"));
  }
  return absl::OkStatus();
}

absl::Status apply_dry(const RequestSampling& in, SamplingParams& out) {
  out.dry_multiplier = in.dry_multiplier.value_or(0.0f);
  EXL3_RETURN_IF_ERROR(
      check_range("sampling.dry_multiplier", out.dry_multiplier, 0.0f, false, 100.0f, false, " (0 = off)"));
  out.dry_base = in.dry_base.value_or(1.75f);
  EXL3_RETURN_IF_ERROR(check_range("sampling.dry_base", out.dry_base, 1.0f, false, 10.0f, false, ""));
  out.dry_allowed_length = in.dry_allowed_length.value_or(2);
  EXL3_RETURN_IF_ERROR(check_range("sampling.dry_allowed_length", out.dry_allowed_length, 1, false, 1000, false, ""));
  out.dry_range = in.dry_range.value_or(0);
  if (out.dry_range < 0) {
    return invalid(absl::StrCat("sampling.dry_range must be >= 0 (0 = the whole history), got ", out.dry_range));
  }
  const std::vector<std::string>& breakers = dry_sequence_breakers(in);
  if (breakers.size() > 64) {
    return invalid(absl::StrCat("sampling.dry_sequence_breakers holds ", breakers.size(), " strings; at most 64"));
  }
  for (size_t i = 0; i < breakers.size(); ++i) {
    if (breakers[i].empty()) return invalid(absl::StrCat("sampling.dry_sequence_breakers[", i, "] is empty"));
  }
  if (out.dry_multiplier != 0.0f) out.dry_breakers = in.dry_breaker_ids;
  return absl::OkStatus();
}

absl::Status apply_sampling(const RequestSampling& in, int32_t vocab_size, uint64_t random_seed, SamplingParams& out) {
  out = SamplingParams{};
  out.temperature = in.temperature.value_or(1.0f);
  EXL3_RETURN_IF_ERROR(
      check_range("sampling.temperature", out.temperature, 0.0f, false, 100.0f, false, " (0 = greedy)"));
  out.top_k = in.top_k.value_or(0);
  EXL3_RETURN_IF_ERROR(check_range("sampling.top_k", out.top_k, 0, false, vocab_size, false, " (0 = off)"));
  out.top_p = in.top_p.value_or(1.0f);
  EXL3_RETURN_IF_ERROR(check_range("sampling.top_p", out.top_p, 0.0f, true, 1.0f, false, " (1 = off)"));
  out.min_p = in.min_p.value_or(0.0f);
  EXL3_RETURN_IF_ERROR(check_range("sampling.min_p", out.min_p, 0.0f, false, 1.0f, false, " (0 = off)"));
  out.repetition_penalty = in.repetition_penalty.value_or(1.0f);
  EXL3_RETURN_IF_ERROR(
      check_range("sampling.repetition_penalty", out.repetition_penalty, 0.0f, true, 10.0f, false, " (1 = off)"));
  out.presence_penalty = in.presence_penalty.value_or(0.0f);
  EXL3_RETURN_IF_ERROR(
      check_range("sampling.presence_penalty", out.presence_penalty, -2.0f, false, 2.0f, false, " (0 = off)"));
  out.frequency_penalty = in.frequency_penalty.value_or(0.0f);
  EXL3_RETURN_IF_ERROR(
      check_range("sampling.frequency_penalty", out.frequency_penalty, -2.0f, false, 2.0f, false, " (0 = off)"));
  out.seed = in.seed.value_or(random_seed);
  EXL3_RETURN_IF_ERROR(apply_token_lists(in, vocab_size, out));
  EXL3_RETURN_IF_ERROR(apply_dry(in, out));
  out.typical_p = in.typical_p.value_or(1.0f);
  EXL3_RETURN_IF_ERROR(check_range("sampling.typical_p", out.typical_p, 0.0f, true, 1.0f, false, " (1 = off)"));
  out.xtc_threshold = in.xtc_threshold.value_or(0.1f);
  EXL3_RETURN_IF_ERROR(check_range("sampling.xtc_threshold", out.xtc_threshold, 0.0f, true, 1.0f, false, ""));
  out.xtc_probability = in.xtc_probability.value_or(0.0f);
  EXL3_RETURN_IF_ERROR(
      check_range("sampling.xtc_probability", out.xtc_probability, 0.0f, false, 1.0f, false, " (0 = off)"));
  out.temperature_last = in.temperature_last.value_or(false);
  out.logprobs = in.logprobs.value_or(0);
  EXL3_RETURN_IF_ERROR(check_range("sampling.logprobs", out.logprobs, 0, false, kMaxLogprobs, false, " (0 = off)"));
  // The proto's ranges are stricter than what the sampler accepts; a failure here is a bug.
  EXL3_CHECK_OK(validate_sampling_params(out, vocab_size));
  return absl::OkStatus();
}

absl::Status apply_stopping(const RequestStopping& in, const ModelLimits& limits, int64_t prompt_len,
                            ValidatedRequest& out) {
  const int64_t room = limits.max_context - prompt_len;  // >= 1 after validate_prompt
  if (in.max_new_tokens.has_value()) {
    const int64_t max_new = *in.max_new_tokens;
    if (max_new < 1) {
      return invalid(
          absl::StrCat("stopping.max_new_tokens must be >= 1 (unset = up to the context limit), got ", max_new));
    }
    if (prompt_len + max_new > limits.max_context) {
      return invalid(absl::StrCat("stopping.max_new_tokens = ", max_new, " with a prompt of ", prompt_len,
                                  " tokens needs ", prompt_len + max_new,
                                  " positions but the context (max_context) is ", limits.max_context,
                                  ": max_new_tokens must be in [1, ", room, "] for this prompt"));
    }
    out.max_new_tokens = static_cast<int32_t>(max_new);
    out.max_new_tokens_set = true;
  } else {
    out.max_new_tokens = static_cast<int32_t>(room);
    out.max_new_tokens_set = false;
  }
  for (size_t i = 0; i < in.stop_token_ids.size(); ++i) {
    const int32_t id = in.stop_token_ids[i];
    if (id < 0 || id >= limits.vocab_size) {
      return invalid(absl::StrCat("stopping.stop_token_ids[", i, "] = ", id, " is not in [0, ", limits.vocab_size,
                                  ") (vocab_size ", limits.vocab_size, ")"));
    }
  }
  for (size_t i = 0; i < in.stop_strings.size(); ++i) {
    if (in.stop_strings[i].empty()) {
      return invalid(absl::StrCat("stopping.stop_strings[", i, "] is empty: stop strings must be non-empty"));
    }
  }
  out.stop_token_ids = in.stop_token_ids;
  std::sort(out.stop_token_ids.begin(), out.stop_token_ids.end());
  out.stop_token_ids.erase(std::unique(out.stop_token_ids.begin(), out.stop_token_ids.end()), out.stop_token_ids.end());
  out.stop_strings = in.stop_strings;
  if (!in.ignore_eos) out.eos_token_ids = limits.eos_token_ids;
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& default_dry_sequence_breakers() {
  static const std::vector<std::string> breakers = {"\n", ":", "\"", "*"};
  return breakers;
}

const std::vector<std::string>& dry_sequence_breakers(const RequestSampling& sampling) {
  return sampling.dry_sequence_breakers ? *sampling.dry_sequence_breakers : default_dry_sequence_breakers();
}

std::vector<int32_t> dry_breaker_ids(const std::vector<std::string>& breakers, int32_t vocab_size,
                                     const std::function<std::string_view(int32_t)>& token_bytes) {
  std::vector<int32_t> ids;
  if (breakers.empty()) return ids;
  for (int32_t id = 0; id < vocab_size; ++id) {
    const std::string_view bytes = token_bytes(id);
    for (const std::string& b : breakers) {
      if (!b.empty() && bytes.find(b) != std::string_view::npos) {
        ids.push_back(id);
        break;
      }
    }
  }
  return ids;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kContext:
      return "context";
  }
  return "unknown";
}

absl::StatusOr<ValidatedRequest> validate_request(const GenerateParams& params, const ModelLimits& limits,
                                                  const std::vector<int32_t>& prompt_ids, uint64_t random_seed) {
  EXL3_CHECK(limits.vocab_size > 0, "vocab_size ", limits.vocab_size);
  EXL3_CHECK(limits.max_context > 0, "max_context ", limits.max_context);
  EXL3_RETURN_IF_ERROR(validate_prompt(params, limits, prompt_ids));

  ValidatedRequest out;
  out.request_id = params.request_id;
  out.prompt_ids = prompt_ids;
  out.max_context = limits.max_context;
  out.skip_special_tokens = params.skip_special_tokens;
  out.vocab_size = limits.vocab_size;
  for (size_t i = 0; i < params.sampling.banned_strings.size(); ++i) {
    if (params.sampling.banned_strings[i].empty()) {
      return invalid(absl::StrCat("sampling.banned_strings[", i, "] is empty: banned strings must be non-empty"));
    }
  }
  out.banned_strings = params.sampling.banned_strings;
  EXL3_RETURN_IF_ERROR(apply_sampling(params.sampling, limits.vocab_size, random_seed, out.sampling));
  EXL3_RETURN_IF_ERROR(apply_stopping(params.stopping, limits, static_cast<int64_t>(prompt_ids.size()), out));
  return out;
}

}  // namespace exl3
