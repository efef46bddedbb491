// The later sampler fields through the public API of a launched CPU cluster split by layers (so
// that the logprobs come from the head rank, not rank 0): per-token logprobs come back (one entry
// per token, the greedy token the most likely alternative), banned ids never appear, greedy DRY
// changes a repetitive output, and bad values are refused with INVALID_ARGUMENT naming the field.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

class SamplerApi : public ApiSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.mode = "layers";
    config.max_seq_len = 512;
    config.max_batch = 4;
    config.log_name = "sampler_api";
    start_server(config);
  }

  grpc::Status unary(const v1::GenerateRequest& request, v1::GenerateResponse* response) {
    return generate_unary(*stub_, request, response, seconds(60));
  }
};

const std::string kRepetitivePrompt =
    "one two three four, one two three four, one two three four, one two three four, one two three";

TEST_F(SamplerApi, LogprobsComeBackForEveryToken) {
  v1::GenerateRequest request = greedy(text_request("The capital of France is", 12));
  request.mutable_sampling()->set_logprobs(5);
  v1::GenerateResponse response;
  const grpc::Status status = unary(request, &response);
  ASSERT_TRUE(status.ok()) << describe(status);
  ASSERT_GT(response.token_ids_size(), 0);
  ASSERT_EQ(response.logprobs_size(), response.token_ids_size());
  for (int i = 0; i < response.logprobs_size(); ++i) {
    const v1::TokenLogprobs& lp = response.logprobs(i);
    EXPECT_EQ(lp.token_id(), response.token_ids(i)) << "token " << i;
    ASSERT_EQ(lp.top_size(), 5) << "token " << i;
    EXPECT_LE(lp.logprob(), 0.0f);
    for (int j = 1; j < lp.top_size(); ++j) EXPECT_LE(lp.top(j).logprob(), lp.top(j - 1).logprob());
    // Greedy with no other setting: the token is the raw argmax.
    EXPECT_EQ(lp.top(0).token_id(), lp.token_id()) << "token " << i;
    EXPECT_FLOAT_EQ(lp.top(0).logprob(), lp.logprob()) << "token " << i;
  }
  // Streaming: every message carries the logprobs of its own tokens.
  int with_tokens = 0;
  const StreamResult streamed = stream_generate(*stub_, request, seconds(60), [&](const v1::GenerateResponse& m) {
    EXPECT_EQ(m.logprobs_size(), m.token_ids_size());
    with_tokens += m.token_ids_size() > 0;
  });
  ASSERT_TRUE(streamed.status.ok()) << describe(streamed.status);
  EXPECT_EQ(streamed.tokens, std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end()));
  EXPECT_GT(with_tokens, 0);
  // Without logprobs, none come back.
  request.mutable_sampling()->clear_logprobs();
  v1::GenerateResponse plain;
  ASSERT_TRUE(unary(request, &plain).ok());
  EXPECT_EQ(plain.logprobs_size(), 0);
}

TEST_F(SamplerApi, BannedIdsNeverAppear) {
  v1::GenerateResponse first;
  ASSERT_TRUE(unary(greedy(text_request(kRepetitivePrompt, 16)), &first).ok());
  ASSERT_GT(first.token_ids_size(), 0);
  // Ban every token greedy decoding produced, then sample with a seed: none may come back.
  std::set<int32_t> banned(first.token_ids().begin(), first.token_ids().end());
  v1::GenerateRequest request = text_request(kRepetitivePrompt, 24);
  request.mutable_sampling()->set_seed(1234);
  request.mutable_sampling()->set_temperature(1.5f);
  request.mutable_stopping()->set_ignore_eos(true);
  for (int32_t id : banned) request.mutable_sampling()->add_banned_token_ids(id);
  v1::GenerateResponse sampled;
  const grpc::Status status = unary(request, &sampled);
  ASSERT_TRUE(status.ok()) << describe(status);
  EXPECT_EQ(sampled.token_ids_size(), 24);
  for (int32_t id : sampled.token_ids()) EXPECT_FALSE(banned.contains(id)) << "banned token " << id << " sampled";
  // Greedy with the first greedy token banned starts differently.
  v1::GenerateRequest greedy_banned = greedy(text_request(kRepetitivePrompt, 4));
  greedy_banned.mutable_sampling()->add_banned_token_ids(first.token_ids(0));
  v1::GenerateResponse other;
  ASSERT_TRUE(unary(greedy_banned, &other).ok());
  ASSERT_GT(other.token_ids_size(), 0);
  EXPECT_NE(other.token_ids(0), first.token_ids(0));
}

TEST_F(SamplerApi, GreedyDryChangesARepetitiveOutput) {
  v1::GenerateRequest request = greedy(text_request(kRepetitivePrompt, 32));
  request.mutable_stopping()->set_ignore_eos(true);
  v1::GenerateResponse plain;
  ASSERT_TRUE(unary(request, &plain).ok());
  request.mutable_sampling()->set_dry_multiplier(5.0f);
  request.mutable_sampling()->set_dry_allowed_length(2);
  request.mutable_sampling()->mutable_dry_sequence_breakers();  // set and empty: no breakers
  v1::GenerateResponse dry;
  const grpc::Status status = unary(request, &dry);
  ASSERT_TRUE(status.ok()) << describe(status);
  EXPECT_EQ(dry.token_ids_size(), 32);
  EXPECT_NE(std::vector<int32_t>(dry.token_ids().begin(), dry.token_ids().end()),
            std::vector<int32_t>(plain.token_ids().begin(), plain.token_ids().end()))
      << "DRY left the greedy continuation of a repetitive prompt unchanged: " << plain.text();
  // The default breakers ("\n", ":", "\"", "*") are accepted and deterministic.
  request.mutable_sampling()->clear_dry_sequence_breakers();
  v1::GenerateResponse a, b;
  ASSERT_TRUE(unary(request, &a).ok());
  ASSERT_TRUE(unary(request, &b).ok());
  EXPECT_EQ(std::vector<int32_t>(a.token_ids().begin(), a.token_ids().end()),
            std::vector<int32_t>(b.token_ids().begin(), b.token_ids().end()));
}

TEST_F(SamplerApi, OtherFiltersRunAndAreSeeded) {
  v1::GenerateRequest request = text_request(kRepetitivePrompt, 16);
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_seed(99);
  s->set_typical_p(0.8f);
  s->set_xtc_threshold(0.05f);
  s->set_xtc_probability(0.5f);
  s->set_temperature_last(true);
  s->set_temperature(1.2f);
  (*s->mutable_logit_bias())[5] = 2.0f;
  v1::GenerateResponse a, b;
  ASSERT_TRUE(unary(request, &a).ok());
  ASSERT_TRUE(unary(request, &b).ok());
  EXPECT_GT(a.token_ids_size(), 0);
  EXPECT_EQ(std::vector<int32_t>(a.token_ids().begin(), a.token_ids().end()),
            std::vector<int32_t>(b.token_ids().begin(), b.token_ids().end()));
}

TEST_F(SamplerApi, BadValuesNameTheField) {
  struct Bad {
    std::string field;
    void (*set)(v1::SamplingParams&);
  };
  const std::vector<Bad> bad = {
      {"sampling.typical_p", [](v1::SamplingParams& s) { s.set_typical_p(1.5f); }},
      {"sampling.logprobs", [](v1::SamplingParams& s) { s.set_logprobs(21); }},
      {"sampling.banned_token_ids", [](v1::SamplingParams& s) { s.add_banned_token_ids(-4); }},
      {"sampling.logit_bias", [](v1::SamplingParams& s) { (*s.mutable_logit_bias())[3] = 500.0f; }},
      {"sampling.dry_base", [](v1::SamplingParams& s) { s.set_dry_base(0.5f); }},
      {"sampling.xtc_probability", [](v1::SamplingParams& s) { s.set_xtc_probability(2.0f); }},
      {"sampling.dry_sequence_breakers", [](v1::SamplingParams& s) {
         s.set_dry_multiplier(1.0f);
         s.mutable_dry_sequence_breakers()->add_strings("");
       }},
  };
  for (const Bad& b : bad) {
    v1::GenerateRequest request = text_request("Hello", 4);
    b.set(*request.mutable_sampling());
    v1::GenerateResponse response;
    const grpc::Status status = unary(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << b.field << ": " << describe(status);
    EXPECT_NE(status.error_message().find(b.field), std::string::npos)
        << "message does not name " << b.field << ": " << status.error_message();
  }
}

}  // namespace
}  // namespace exl3::testing
