// Tests of validate_request() for the later sampler fields (logit bias, bans, DRY, typical-p, XTC,
// temperature last, logprobs): defaults, normalisation (sorted bias, deduplicated bans), refusals
// naming the field, and the breaker strings turned into token ids.
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/scheduler/request.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

constexpr int32_t kVocab = 10;

absl::StatusOr<ValidatedRequest> validate(const RequestSampling& sampling) {
  GenerateParams params;
  params.prompt = std::vector<int32_t>{1, 2, 3};
  params.sampling = sampling;
  return validate_request(params, ModelLimits{kVocab, 64, {9}}, {1, 2, 3}, 7);
}

TEST(RequestSampling, DefaultsLeaveTheLaterFiltersOff) {
  const absl::StatusOr<ValidatedRequest> r = validate(RequestSampling{});
  ASSERT_TRUE(r.ok()) << r.status();
  const SamplingParams& s = r->sampling;
  EXPECT_TRUE(s.logit_bias.empty());
  EXPECT_TRUE(s.banned_ids.empty());
  EXPECT_EQ(s.dry_multiplier, 0.0f);
  EXPECT_EQ(s.dry_base, 1.75f);
  EXPECT_EQ(s.dry_allowed_length, 2);
  EXPECT_EQ(s.dry_range, 0);
  EXPECT_EQ(s.typical_p, 1.0f);
  EXPECT_EQ(s.xtc_threshold, 0.1f);
  EXPECT_EQ(s.xtc_probability, 0.0f);
  EXPECT_FALSE(s.temperature_last);
  EXPECT_EQ(s.logprobs, 0);
  EXPECT_EQ(default_dry_sequence_breakers(), (std::vector<std::string>{"\n", ":", "\"", "*"}));
}

TEST(RequestSampling, NormalisesAndKeepsGivenValues) {
  RequestSampling in;
  in.logit_bias = {{7, 1.5f}, {2, -3.0f}};
  in.banned_token_ids = {5, 1, 5};
  in.dry_multiplier = 0.8f;
  in.dry_base = 2.0f;
  in.dry_allowed_length = 3;
  in.dry_range = 100;
  in.dry_breaker_ids = {0, 4};
  in.typical_p = 0.9f;
  in.xtc_threshold = 0.2f;
  in.xtc_probability = 0.5f;
  in.temperature_last = true;
  in.logprobs = 20;
  const absl::StatusOr<ValidatedRequest> r = validate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  const SamplingParams& s = r->sampling;
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0].id, 2);
  EXPECT_EQ(s.logit_bias[0].bias, -3.0f);
  EXPECT_EQ(s.logit_bias[1].id, 7);
  EXPECT_EQ(s.banned_ids, (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(s.dry_multiplier, 0.8f);
  EXPECT_EQ(s.dry_base, 2.0f);
  EXPECT_EQ(s.dry_allowed_length, 3);
  EXPECT_EQ(s.dry_range, 100);
  EXPECT_EQ(s.dry_breakers, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(s.typical_p, 0.9f);
  EXPECT_EQ(s.xtc_threshold, 0.2f);
  EXPECT_EQ(s.xtc_probability, 0.5f);
  EXPECT_TRUE(s.temperature_last);
  EXPECT_EQ(s.logprobs, 20);
  // DRY off: the breaker ids are not carried.
  in.dry_multiplier = 0.0f;
  EXPECT_TRUE(validate(in)->sampling.dry_breakers.empty());
}

TEST(RequestSampling, RefusesEachBadFieldByName) {
  struct Bad {
    std::string field;
    void (*set)(RequestSampling&);
  };
  const std::vector<Bad> bad = {
      {"sampling.logit_bias[10]", [](RequestSampling& s) { s.logit_bias = {{10, 1.0f}}; }},
      {"sampling.logit_bias[3]", [](RequestSampling& s) { s.logit_bias = {{3, 100.5f}}; }},
      {"sampling.banned_token_ids[1]", [](RequestSampling& s) { s.banned_token_ids = {2, -1}; }},
      {"sampling.banned_token_ids", [](RequestSampling& s) { s.banned_token_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9}; }},
      {"sampling.dry_multiplier", [](RequestSampling& s) { s.dry_multiplier = 101.0f; }},
      {"sampling.dry_base", [](RequestSampling& s) { s.dry_base = 0.5f; }},
      {"sampling.dry_allowed_length", [](RequestSampling& s) { s.dry_allowed_length = 0; }},
      {"sampling.dry_range", [](RequestSampling& s) { s.dry_range = -3; }},
      {"sampling.dry_sequence_breakers[1]", [](RequestSampling& s) {
         s.dry_sequence_breakers = std::vector<std::string>{"a", ""};
       }},
      {"sampling.dry_sequence_breakers", [](RequestSampling& s) {
         s.dry_sequence_breakers = std::vector<std::string>(65, "x");
       }},
      {"sampling.typical_p", [](RequestSampling& s) { s.typical_p = 0.0f; }},
      {"sampling.xtc_threshold", [](RequestSampling& s) { s.xtc_threshold = 0.0f; }},
      {"sampling.xtc_probability", [](RequestSampling& s) { s.xtc_probability = -0.1f; }},
      {"sampling.logprobs", [](RequestSampling& s) { s.logprobs = 21; }},
  };
  for (const Bad& b : bad) {
    RequestSampling in;
    b.set(in);
    const absl::StatusOr<ValidatedRequest> r = validate(in);
    ASSERT_FALSE(r.ok()) << b.field;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.field), std::string::npos) << r.status().message();
  }
}

TEST(RequestSampling, BreakerIdsAreTheTokensContainingABreakerString) {
  const std::vector<std::string> tokens = {"a", "\n", "b:c", "\"q", "plain", "x*", "", ": "};
  const auto bytes = [&](int32_t id) { return std::string_view(tokens[id]); };
  EXPECT_EQ(dry_breaker_ids(default_dry_sequence_breakers(), 8, bytes), (std::vector<int32_t>{1, 2, 3, 5, 7}));
  EXPECT_EQ(dry_breaker_ids({"pl", "b"}, 8, bytes), (std::vector<int32_t>{2, 4}));
  EXPECT_TRUE(dry_breaker_ids({}, 8, bytes).empty());
  RequestSampling none;
  none.dry_sequence_breakers = std::vector<std::string>{};
  EXPECT_TRUE(dry_sequence_breakers(none).empty()) << "set and empty = no breakers";
  EXPECT_EQ(dry_sequence_breakers(RequestSampling{}), default_dry_sequence_breakers());
}

}  // namespace
}  // namespace exl3
