// Conversion of exl3-client's parsed generate flags into an exl3.v1.GenerateRequest, and the
// parsing of token id lists ("1,2,3"). Only the shape of the input is checked here (prompt or
// ids, well-formed numbers); value ranges are the server's to validate, so a flag's value is
// passed on exactly as given and an out-of-range one comes back as INVALID_ARGUMENT.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/inference.pb.h"

namespace exl3::client {

// The generate subcommand's flags; unset optionals leave the request field unset (server default).
struct GenerateOptions {
  std::optional<std::string> prompt;  // positional PROMPT
  std::optional<std::string> tokens;  // --tokens "1,2,3" instead of a prompt
  std::optional<int32_t> max_new_tokens;
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> logit_bias;    // --logit-bias ID=BIAS, repeatable
  std::vector<int32_t> banned_token_ids;  // --ban ID, repeatable
  std::optional<float> dry_multiplier;
  std::optional<float> dry_base;
  std::optional<int32_t> dry_allowed_length;
  std::optional<int32_t> dry_range;
  std::vector<std::string> dry_breakers;  // --dry-breaker STR, repeatable (none given: server defaults)
  bool no_dry_breakers = false;           // --no-dry-breakers: an empty breaker list
  std::optional<float> typical_p;
  std::optional<float> xtc_threshold;
  std::optional<float> xtc_probability;
  bool temperature_last = false;
  std::optional<int32_t> logprobs;
  std::vector<std::string> banned_strings;  // --ban-string STR, repeatable
  std::vector<std::string> stop_strings;  // --stop, repeatable
  std::vector<int32_t> stop_token_ids;    // --stop-token, repeatable
  bool ignore_eos = false;
  bool no_bos = false;  // sets add_bos = false (unset otherwise)
  bool special_tokens_as_text = false;
  bool skip_special_tokens = false;
  std::string request_id;
};

// InvalidArgument when neither or both of prompt and tokens are given, or tokens is malformed.
absl::StatusOr<exl3::v1::GenerateRequest> build_generate_request(const GenerateOptions& options);

// Token ids separated by commas and/or whitespace ("1,2,3", "1 2 3", "[1, 2, 3]" with optional
// brackets). Each must be a decimal integer in int32 range; negative ids are passed on (the
// server refuses them). InvalidArgument naming the bad item otherwise; an empty list is allowed.
absl::StatusOr<std::vector<int32_t>> parse_token_ids(std::string_view text);

}  // namespace exl3::client
