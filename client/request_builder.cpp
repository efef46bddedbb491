// Building GenerateRequest from exl3-client's generate flags; see request_builder.h.
#include "client/request_builder.h"

#include <cctype>
#include <charconv>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace exl3::client {

absl::StatusOr<std::vector<int32_t>> parse_token_ids(std::string_view text) {
  std::string_view rest = text;
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  rest = trim(rest);
  if (!rest.empty() && rest.front() == '[') {
    if (rest.back() != ']')
      return absl::InvalidArgumentError(absl::StrCat("unbalanced '[' in token ids '", std::string(text), "'"));
    rest = trim(rest.substr(1, rest.size() - 2));
  }
  std::vector<int32_t> ids;
  auto is_separator = [](char c) { return c == ',' || std::isspace(static_cast<unsigned char>(c)); };
  size_t i = 0;
  bool expect_item = false;  // a comma was seen, so an item must follow
  while (i < rest.size()) {
    if (std::isspace(static_cast<unsigned char>(rest[i]))) {
      ++i;
      continue;
    }
    if (rest[i] == ',') {
      if (ids.empty() || expect_item)
        return absl::InvalidArgumentError(absl::StrCat("empty item in token ids '", std::string(text), "'"));
      expect_item = true;
      ++i;
      continue;
    }
    size_t end = i;
    while (end < rest.size() && !is_separator(rest[end])) ++end;
    const std::string_view item = rest.substr(i, end - i);
    int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (ec != std::errc() || ptr != item.data() + item.size()) {
      return absl::InvalidArgumentError(absl::StrCat("'", std::string(item), "' is not a token id (an int32)"));
    }
    ids.push_back(id);
    expect_item = false;
    i = end;
  }
  if (expect_item)
    return absl::InvalidArgumentError(absl::StrCat("trailing ',' in token ids '", std::string(text), "'"));
  return ids;
}

absl::StatusOr<exl3::v1::GenerateRequest> build_generate_request(const GenerateOptions& options) {
  if (options.prompt.has_value() == options.tokens.has_value()) {
    return absl::InvalidArgumentError("give either a PROMPT or --tokens, not both and not neither");
  }
  exl3::v1::GenerateRequest request;
  request.set_request_id(options.request_id);
  if (options.prompt) {
    request.set_prompt(*options.prompt);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids = parse_token_ids(*options.tokens);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("--tokens: ", std::string(ids.status().message())));
    if (ids->empty()) return absl::InvalidArgumentError("--tokens: no token ids given");
    request.mutable_prompt_tokens()->mutable_ids()->Add(ids->begin(), ids->end());
  }
  if (options.no_bos) request.set_add_bos(false);
  request.set_special_tokens_as_text(options.special_tokens_as_text);
  request.set_skip_special_tokens(options.skip_special_tokens);

  exl3::v1::SamplingParams& s = *request.mutable_sampling();
  if (options.temperature) s.set_temperature(*options.temperature);
  if (options.top_k) s.set_top_k(*options.top_k);
  if (options.top_p) s.set_top_p(*options.top_p);
  if (options.min_p) s.set_min_p(*options.min_p);
  if (options.repetition_penalty) s.set_repetition_penalty(*options.repetition_penalty);
  if (options.presence_penalty) s.set_presence_penalty(*options.presence_penalty);
  if (options.frequency_penalty) s.set_frequency_penalty(*options.frequency_penalty);
  if (options.seed) s.set_seed(*options.seed);
  for (const std::string& item : options.logit_bias) {
    const size_t eq = item.find('=');
    int32_t id = 0;
    float bias = 0.0f;
    if (eq == std::string::npos || !absl::SimpleAtoi(item.substr(0, eq), &id) ||
        !absl::SimpleAtof(item.substr(eq + 1), &bias)) {
      return absl::InvalidArgumentError(absl::StrCat("--logit-bias: expected ID=BIAS, got \"", item, "\""));
    }
    (*s.mutable_logit_bias())[id] = bias;
  }
  for (int32_t id : options.banned_token_ids) s.add_banned_token_ids(id);
  if (options.dry_multiplier) s.set_dry_multiplier(*options.dry_multiplier);
  if (options.dry_base) s.set_dry_base(*options.dry_base);
  if (options.dry_allowed_length) s.set_dry_allowed_length(*options.dry_allowed_length);
  if (options.dry_range) s.set_dry_range(*options.dry_range);
  if (options.no_dry_breakers || !options.dry_breakers.empty()) {
    for (const std::string& b : options.dry_breakers) s.mutable_dry_sequence_breakers()->add_strings(b);
    s.mutable_dry_sequence_breakers();
  }
  if (options.typical_p) s.set_typical_p(*options.typical_p);
  if (options.xtc_threshold) s.set_xtc_threshold(*options.xtc_threshold);
  if (options.xtc_probability) s.set_xtc_probability(*options.xtc_probability);
  if (options.temperature_last) s.set_temperature_last(true);
  if (options.logprobs) s.set_logprobs(*options.logprobs);
  for (const std::string& str : options.banned_strings) s.add_banned_strings(str);

  exl3::v1::StoppingCriteria& stop = *request.mutable_stopping();
  if (options.max_new_tokens) stop.set_max_new_tokens(*options.max_new_tokens);
  for (const std::string& str : options.stop_strings) stop.add_stop_strings(str);
  for (int32_t id : options.stop_token_ids) stop.add_stop_token_ids(id);
  stop.set_ignore_eos(options.ignore_eos);
  return request;
}

}  // namespace exl3::client
