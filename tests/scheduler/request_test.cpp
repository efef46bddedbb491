// Tests of validate_request(): defaults applied, boundaries accepted, and every refusal names its
// field and the allowed range.
#include "coordinator/scheduler/request.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace exl3 {
namespace {

constexpr int32_t kVocab = 1000;
constexpr int32_t kContext = 64;
constexpr uint64_t kRandomSeed = 0x1234567890abcdefull;

ModelLimits limits() { return ModelLimits{kVocab, kContext, {2, 7}}; }

GenerateParams token_params(std::vector<int32_t> ids) {
  GenerateParams params;
  params.request_id = "r1";
  params.prompt = std::move(ids);
  return params;
}

// The ids a gRPC layer would pass: the prompt_tokens as given, or a stand-in tokenization.
std::vector<int32_t> ids_of(const GenerateParams& params) {
  if (const auto* ids = std::get_if<std::vector<int32_t>>(&params.prompt)) return *ids;
  if (const auto* text = std::get_if<std::string>(&params.prompt)) {
    return std::vector<int32_t>(text->size(), 5);  // one token per byte
  }
  return {};
}

absl::StatusOr<ValidatedRequest> validate(const GenerateParams& params) {
  return validate_request(params, limits(), ids_of(params), kRandomSeed);
}

TEST(ValidateRequest, AppliesDefaults) {
  const auto r = validate(token_params({1, 3, 5, 9}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id, "r1");
  EXPECT_EQ(r->prompt_ids, (std::vector<int32_t>{1, 3, 5, 9}));
  EXPECT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_EQ(r->sampling.top_p, 1.0f);
  EXPECT_EQ(r->sampling.min_p, 0.0f);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(r->sampling.presence_penalty, 0.0f);
  EXPECT_EQ(r->sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(r->sampling.seed, kRandomSeed);
  EXPECT_EQ(r->max_new_tokens, kContext - 4);
  EXPECT_FALSE(r->max_new_tokens_set);
  EXPECT_EQ(r->max_context, kContext);
  EXPECT_EQ(r->eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_TRUE(r->stop_token_ids.empty());
}

// The first eight sampling fields (temperature .. seed), the others unset.
RequestSampling basic_sampling(float temperature, int32_t top_k, float top_p, float min_p, float repetition,
                               float presence, float frequency, uint64_t seed) {
  RequestSampling s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.repetition_penalty = repetition;
  s.presence_penalty = presence;
  s.frequency_penalty = frequency;
  s.seed = seed;
  return s;
}

TEST(ValidateRequest, KeepsGivenValues) {
  GenerateParams params = token_params({1, 2, 3});
  params.sampling = basic_sampling(0.0f, 40, 0.9f, 0.05f, 1.1f, -0.5f, 0.5f, 42);
  params.stopping.max_new_tokens = 10;
  params.stopping.stop_token_ids = {9, 3, 9};
  params.stopping.stop_strings = {"\n\n"};
  params.stopping.ignore_eos = true;
  params.skip_special_tokens = true;
  const auto r = validate(params);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sampling.temperature, 0.0f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r->sampling.presence_penalty, -0.5f);
  EXPECT_EQ(r->sampling.frequency_penalty, 0.5f);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->max_new_tokens, 10);
  EXPECT_TRUE(r->max_new_tokens_set);
  EXPECT_TRUE(r->eos_token_ids.empty());
  EXPECT_EQ(r->stop_token_ids, (std::vector<int32_t>{3, 9}));
  EXPECT_EQ(r->stop_strings, (std::vector<std::string>{"\n\n"}));
  EXPECT_TRUE(r->skip_special_tokens);
  EXPECT_TRUE(r->banned_strings.empty());
  EXPECT_EQ(r->vocab_size, kVocab);
}

TEST(ValidateRequest, KeepsBannedStringsAsGiven) {
  GenerateParams params = token_params({1, 2, 3});
  params.sampling.banned_strings = {"Dragon", " the end", "dragon", "\xc3\xa9"};
  const auto r = validate(params);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->banned_strings, (std::vector<std::string>{"Dragon", " the end", "dragon", "\xc3\xa9"}));
}

TEST(ValidateRequest, AcceptsRangeBoundaries) {
  GenerateParams params = token_params({1, 2, 3, 4});
  params.sampling = basic_sampling(100.0f, kVocab, 1.0f, 1.0f, 10.0f, 2.0f, -2.0f, 0);
  params.stopping.max_new_tokens = kContext - 4;
  params.stopping.stop_token_ids = {0, kVocab - 1};
  EXPECT_TRUE(validate(params).ok()) << validate(params).status();

  params.sampling = basic_sampling(0.0f, 0, 1e-6f, 0.0f, 1e-6f, -2.0f, 2.0f, 0);
  params.stopping.max_new_tokens = 1;
  EXPECT_TRUE(validate(params).ok()) << validate(params).status();

  // The longest prompt leaves one position to generate into.
  EXPECT_TRUE(validate(token_params(std::vector<int32_t>(kContext - 1, 4))).ok());
}

struct ErrorCase {
  std::string name;
  std::function<void(GenerateParams&)> edit;
  std::vector<std::string> expected;  // substrings of the message: the field, its range, the values
};

TEST(ValidateRequest, RefusesEachBadFieldByName) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<ErrorCase> cases = {
      {"no input", [](GenerateParams& p) { p.prompt = std::monostate{}; }, {"prompt"}},
      {"empty text", [](GenerateParams& p) { p.prompt = std::string(); }, {"prompt", "empty"}},
      {"empty ids", [](GenerateParams& p) { p.prompt = std::vector<int32_t>{}; }, {"prompt_tokens", "empty"}},
      {"text too long",
       [](GenerateParams& p) { p.prompt = std::string(kContext, 'a'); },
       {"prompt", "64 tokens", "holds 64", "at most 63"}},
      {"ids too long",
       [](GenerateParams& p) { p.prompt = std::vector<int32_t>(kContext + 6, 1); },
       {"prompt_tokens", "70 tokens", "holds 64"}},
      {"unknown id",
       [](GenerateParams& p) {
         p.prompt = std::vector<int32_t>{1, 2, 1000, 3};
       },
       {"prompt_tokens", "token id 1000", "index 2", "[0, 1000)", "vocab_size 1000"}},
      {"negative id",
       [](GenerateParams& p) { p.prompt = std::vector<int32_t>{-4}; },
       {"prompt_tokens", "token id -4", "index 0"}},
      {"temperature low",
       [](GenerateParams& p) { p.sampling.temperature = -0.5f; },
       {"sampling.temperature", "[0, 100]", "-0.5"}},
      {"temperature high",
       [](GenerateParams& p) { p.sampling.temperature = 100.5f; },
       {"sampling.temperature", "[0, 100]", "100.5"}},
      {"temperature nan",
       [nan](GenerateParams& p) { p.sampling.temperature = nan; },
       {"sampling.temperature", "[0, 100]", "nan"}},
      {"top_k negative", [](GenerateParams& p) { p.sampling.top_k = -1; }, {"sampling.top_k", "[0, 1000]", "-1"}},
      {"top_k over vocab", [](GenerateParams& p) { p.sampling.top_k = 1001; }, {"sampling.top_k", "[0, 1000]"}},
      {"top_p high", [](GenerateParams& p) { p.sampling.top_p = 1.5f; }, {"sampling.top_p", "(0, 1]", "1.5"}},
      {"top_p zero", [](GenerateParams& p) { p.sampling.top_p = 0.0f; }, {"sampling.top_p", "(0, 1]"}},
      {"top_p nan", [nan](GenerateParams& p) { p.sampling.top_p = nan; }, {"sampling.top_p", "(0, 1]"}},
      {"min_p low", [](GenerateParams& p) { p.sampling.min_p = -0.1f; }, {"sampling.min_p", "[0, 1]"}},
      {"min_p high", [](GenerateParams& p) { p.sampling.min_p = 1.1f; }, {"sampling.min_p", "[0, 1]", "1.1"}},
      {"repetition zero",
       [](GenerateParams& p) { p.sampling.repetition_penalty = 0.0f; },
       {"sampling.repetition_penalty", "(0, 10]"}},
      {"repetition high",
       [](GenerateParams& p) { p.sampling.repetition_penalty = 10.5f; },
       {"sampling.repetition_penalty", "(0, 10]", "10.5"}},
      {"repetition nan",
       [nan](GenerateParams& p) { p.sampling.repetition_penalty = nan; },
       {"sampling.repetition_penalty", "(0, 10]"}},
      {"presence high",
       [](GenerateParams& p) { p.sampling.presence_penalty = 2.5f; },
       {"sampling.presence_penalty", "[-2, 2]", "2.5"}},
      {"presence nan",
       [nan](GenerateParams& p) { p.sampling.presence_penalty = nan; },
       {"sampling.presence_penalty", "[-2, 2]"}},
      {"frequency low",
       [](GenerateParams& p) { p.sampling.frequency_penalty = -3.0f; },
       {"sampling.frequency_penalty", "[-2, 2]", "-3"}},
      {"max_new zero",
       [](GenerateParams& p) { p.stopping.max_new_tokens = 0; },
       {"stopping.max_new_tokens", ">= 1", "got 0"}},
      {"max_new over context",
       [](GenerateParams& p) { p.stopping.max_new_tokens = 61; },
       {"stopping.max_new_tokens = 61", "prompt of 4 tokens", "65 positions", "max_context) is 64", "[1, 60]"}},
      {"stop id high",
       [](GenerateParams& p) {
         p.stopping.stop_token_ids = {5, 1000};
       },
       {"stopping.stop_token_ids[1] = 1000", "[0, 1000)"}},
      {"stop id negative",
       [](GenerateParams& p) { p.stopping.stop_token_ids = {-1}; },
       {"stopping.stop_token_ids[0] = -1"}},
      {"empty stop string",
       [](GenerateParams& p) {
         p.stopping.stop_strings = {"end", ""};
       },
       {"stopping.stop_strings[1]", "empty"}},
      {"empty banned string",
       [](GenerateParams& p) {
         p.sampling.banned_strings = {"dragon", "", "x"};
       },
       {"sampling.banned_strings[1]", "empty"}},
  };
  for (const ErrorCase& c : cases) {
    GenerateParams params = token_params({1, 2, 3, 4});
    c.edit(params);
    const auto r = validate(params);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    for (const std::string& part : c.expected) {
      EXPECT_NE(r.status().message().find(part), std::string::npos)
          << c.name << ": \"" << r.status().message() << "\" lacks \"" << part << "\"";
    }
  }
}

TEST(ValidateRequest, TextPromptThatTokenizesToNothingIsRefused) {
  GenerateParams params;
  params.prompt = std::string(" ");
  const auto r = validate_request(params, limits(), {}, kRandomSeed);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("prompt"), std::string::npos) << r.status();
}

TEST(FinishReason, Names) {
  EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::kEos), "eos");
  EXPECT_STREQ(finish_reason_name(FinishReason::kStopString), "stop_string");
  EXPECT_STREQ(finish_reason_name(FinishReason::kStopToken), "stop_token");
  EXPECT_STREQ(finish_reason_name(FinishReason::kContext), "context");
}

}  // namespace
}  // namespace exl3
