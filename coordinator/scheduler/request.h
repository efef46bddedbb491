// Generate requests in plain C++: GenerateParams mirrors exl3.v1.GenerateRequest (the gRPC layer
// fills it field by field), and validate_request() turns it into a ValidatedRequest. Validation is
// the only place request parameters are normalised: every default is applied here and nowhere else,
// and every out-of-range value is refused with INVALID_ARGUMENT naming the field and its range.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/sampling.h"

namespace exl3 {

// exl3.v1.SamplingParams: unset fields take the defaults written in inference.proto.
struct RequestSampling {
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::pair<int32_t, float>> logit_bias;  // the proto's map, in any order
  std::vector<int32_t> banned_token_ids;              // any order, duplicates allowed
  std::optional<float> dry_multiplier;
  std::optional<float> dry_base;
  std::optional<int32_t> dry_allowed_length;
  std::optional<int32_t> dry_range;
  // Unset = default_dry_sequence_breakers(); set and empty = no breakers.
  std::optional<std::vector<std::string>> dry_sequence_breakers;
  // The token ids whose text contains one of the breaker strings (admission fills this from the
  // tokenizer: dry_breaker_ids); validate_request takes them as they are.
  std::vector<int32_t> dry_breaker_ids;
  std::optional<float> typical_p;
  std::optional<float> xtc_threshold;
  std::optional<float> xtc_probability;
  std::optional<bool> temperature_last;
  std::optional<int32_t> logprobs;
  // Strings the output text must not contain (ASCII-case-insensitive; the serving loop's
  // BannedStringFilter); each non-empty.
  std::vector<std::string> banned_strings;
};

// DRY's sequence breakers when a request names none (those of text-generation-webui and
// ExLlamaV3): "\n", ":", "\"", "*".
const std::vector<std::string>& default_dry_sequence_breakers();
// The sequence breakers a request uses: its own, or the defaults when unset.
const std::vector<std::string>& dry_sequence_breakers(const RequestSampling& sampling);
// Ids in [0, vocab_size) whose token bytes (token_bytes(id)) contain one of `breakers`, increasing.
std::vector<int32_t> dry_breaker_ids(const std::vector<std::string>& breakers, int32_t vocab_size,
                                     const std::function<std::string_view(int32_t)>& token_bytes);

// exl3.v1.StoppingCriteria.
struct RequestStopping {
  std::optional<int32_t> max_new_tokens;
  std::vector<std::string> stop_strings;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
};

// exl3.v1.GenerateRequest. `prompt` is the proto's `oneof input`: monostate when neither is set,
// a string for `prompt` (text), a vector for `prompt_tokens`.
struct GenerateParams {
  std::string request_id;
  std::variant<std::monostate, std::string, std::vector<int32_t>> prompt;
  std::optional<bool> add_bos;
  bool special_tokens_as_text = false;
  RequestSampling sampling;
  RequestStopping stopping;
  bool skip_special_tokens = false;
};

// What the served model allows.
struct ModelLimits {
  int32_t vocab_size = 0;   // token ids are in [0, vocab_size)
  int32_t max_context = 0;  // longest sequence served: prompt + output tokens
  std::vector<int32_t> eos_token_ids;
};

// exl3.v1.FinishReason, without UNSPECIFIED.
enum class FinishReason {
  kLength,      // reached max_new_tokens
  kEos,         // sampled an end-of-sequence token of the model
  kStopString,  // the output text matched a stop string (detected by the caller on text)
  kStopToken,   // sampled one of stop_token_ids
  kContext,     // reached the context limit
};

// Lower-case name for logs and messages: "length", "eos", "stop_string", "stop_token", "context".
const char* finish_reason_name(FinishReason reason);

// A request with every default applied and every value in range. The scheduler relies on these
// invariants: prompt_ids non-empty and each in [0, vocab); 1 <= max_new_tokens and
// prompt_ids.size() + max_new_tokens <= max_context.
struct ValidatedRequest {
  std::string request_id;  // as given (the service assigns one when the client left it empty)
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;  // kernels/sampling.h, defaults applied, seed always set
  int32_t max_new_tokens = 0;
  // True when the client set max_new_tokens; false when it defaulted to max_context - prompt
  // length. Reaching the limit then finishes with kLength or kContext respectively.
  bool max_new_tokens_set = false;
  int32_t max_context = 0;
  std::vector<int32_t> eos_token_ids;   // the model's; empty when ignore_eos
  std::vector<int32_t> stop_token_ids;  // sorted, without duplicates
  std::vector<std::string> stop_strings;
  bool skip_special_tokens = false;
  std::vector<std::string> banned_strings;  // sampling.banned_strings as given (each non-empty)
  // The model's vocabulary size (limits.vocab_size); the scheduler refuses a rewind whose bans
  // would leave no token. 0 = unknown (no such check).
  int32_t vocab_size = 0;
};

// Validates `params` against the model and normalises it.
//  - prompt_ids: the prompt to run, as token ids: the tokenizer's output for a text prompt (BOS
//    per add_bos already applied), or params' prompt_tokens as given (after BOS when add_bos is true).
//  - random_seed: the seed used when params.sampling.seed is unset (the service draws it, so this
//    function stays deterministic and testable).
// Errors are INVALID_ARGUMENT naming the field ("prompt", "prompt_tokens", "sampling.top_p",
// "stopping.max_new_tokens", ...) with the allowed range and the value received. Ranges follow
// inference.proto: temperature [0, 100], top_k [0, vocab_size], top_p (0, 1], min_p [0, 1],
// repetition_penalty (0, 10], presence/frequency penalties [-2, 2], logit_bias ids in
// [0, vocab_size) with biases in [-100, 100], banned_token_ids in [0, vocab_size) leaving one token
// unbanned, dry_multiplier [0, 100], dry_base [1, 10], dry_allowed_length [1, 1000], dry_range
// >= 0, at most 64 non-empty dry_sequence_breakers, typical_p (0, 1], xtc_threshold (0, 1],
// xtc_probability [0, 1], logprobs [0, 20], max_new_tokens >= 1 with
// prompt length + max_new_tokens <= max_context (refused, never clamped), prompt ids and
// stop_token_ids in [0, vocab_size), stop strings and sampling.banned_strings non-empty. A prompt
// must leave room for at least one generated token.
absl::StatusOr<ValidatedRequest> validate_request(const GenerateParams& params, const ModelLimits& limits,
                                                  const std::vector<int32_t>& prompt_ids, uint64_t random_seed);

}  // namespace exl3
