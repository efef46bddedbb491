// Malformed and impatient requests against a launched server: each invalid Generate (streaming
// and unary) is refused with INVALID_ARGUMENT whose message names the offending field, Detokenize
// refuses unknown ids, a client deadline ends a call with DEADLINE_EXCEEDED and the server drops
// the abandoned sequence; after each of these the launcher is still running and a normal request
// still completes.
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kMaxSeqLen = 512;

class BadRequests : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.max_seq_len = kMaxSeqLen;
    config.max_batch = 4;
    config.log_name = "bad_requests";
    start_server(config);
  }

  void SetUp() override {
    ServerSuite::SetUp();
    if (!HasFatalFailure()) stub_ = server().stub();
  }

  // Both Generate and GenerateUnary refuse `request` with INVALID_ARGUMENT naming `field`.
  void expect_invalid(const v1::GenerateRequest& request, const std::string& field) {
    const StreamResult streamed = stream_generate(*stub_, request, seconds(10));
    EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(streamed.status);
    EXPECT_NE(streamed.status.error_message().find(field), std::string::npos)
        << "message does not name " << field << ": " << streamed.status.error_message();
    EXPECT_EQ(streamed.messages, 0);

    grpc::ClientContext context;
    set_timeout(context, seconds(10));
    v1::GenerateResponse response;
    const grpc::Status unary = stub_->GenerateUnary(&context, request, &response);
    EXPECT_EQ(unary.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(unary);
    EXPECT_NE(unary.error_message().find(field), std::string::npos)
        << "message does not name " << field << ": " << unary.error_message();
  }

  // The launcher is alive, the health service says SERVING and a small greedy request completes.
  void expect_still_serving() {
    EXPECT_FALSE(server().wait_exit(TestClock::now()).has_value()) << "exl3-launch exited";
    HealthStatus health = HealthResponse::UNKNOWN;
    const grpc::Status checked = health_check(server().channel(), &health);
    EXPECT_TRUE(checked.ok()) << describe(checked);
    EXPECT_EQ(health, HealthResponse::SERVING);
    const StreamResult r = stream_generate(*stub_, greedy(text_request("Hello there", 8)), seconds(30));
    ASSERT_TRUE(r.status.ok()) << describe(r.status);
    EXPECT_TRUE(r.tokens.size() == 8u || r.finish_reason == v1::FINISH_REASON_EOS) << r.tokens.size() << " tokens";
    EXPECT_TRUE(r.has_usage);
  }

  // Waits (bounded) until the server has nothing queued or running.
  void expect_idle_within(milliseconds timeout) {
    const auto deadline = TestClock::now() + timeout;
    v1::StatsResponse s;
    while (true) {
      ASSERT_TRUE(stats(*stub_, &s).ok());
      if (s.running_requests() == 0 && s.queued_requests() == 0) return;
      if (TestClock::now() >= deadline) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    ADD_FAILURE() << "still " << s.running_requests() << " running and " << s.queued_requests() << " queued";
  }

  std::unique_ptr<v1::Inference::Stub> stub_;
};

std::vector<int32_t> ids_of_length(int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = 100 + i % 3000;
  return ids;
}

TEST_F(BadRequests, EmptyPromptNamesPrompt) {
  expect_invalid(text_request("", 8), "prompt");
  expect_invalid(token_request({}, 8), "prompt_tokens");
  v1::GenerateRequest no_input;
  no_input.mutable_stopping()->set_max_new_tokens(8);
  expect_invalid(no_input, "prompt");
  expect_still_serving();
}

TEST_F(BadRequests, TopPAboveOneNamesTopP) {
  v1::GenerateRequest r = text_request("Hello", 8);
  r.mutable_sampling()->set_top_p(1.5f);
  expect_invalid(r, "sampling.top_p");
  expect_still_serving();
}

TEST_F(BadRequests, NegativeTemperatureNamesTemperature) {
  v1::GenerateRequest r = text_request("Hello", 8);
  r.mutable_sampling()->set_temperature(-1.0f);
  expect_invalid(r, "sampling.temperature");
  expect_still_serving();
}

TEST_F(BadRequests, NegativeTopKNamesTopK) {
  v1::GenerateRequest r = text_request("Hello", 8);
  r.mutable_sampling()->set_top_k(-3);
  expect_invalid(r, "sampling.top_k");
  expect_still_serving();
}

TEST_F(BadRequests, MaxNewTokensBeyondContextNamesMaxNewTokens) {
  // 20 prompt tokens + 493 new = 513 positions, one more than --max-seq-len 512.
  expect_invalid(token_request(ids_of_length(20), kMaxSeqLen - 20 + 1), "stopping.max_new_tokens");
  expect_invalid(text_request("Hello", 100000), "stopping.max_new_tokens");
  expect_invalid(text_request("Hello", 0), "stopping.max_new_tokens");
  // Exactly filling the context is allowed.
  const StreamResult fits =
      stream_generate(*stub_, greedy(token_request(ids_of_length(kMaxSeqLen - 4), 4)), seconds(30));
  EXPECT_TRUE(fits.status.ok()) << describe(fits.status);
  expect_still_serving();
}

TEST_F(BadRequests, UnknownTokenIdNamesPromptTokens) {
  v1::GenerateRequest r = token_request({0, 200, 99999, 300}, 8);
  expect_invalid(r, "prompt_tokens");
  const StreamResult streamed = stream_generate(*stub_, r, seconds(10));
  EXPECT_NE(streamed.status.error_message().find("99999"), std::string::npos) << streamed.status.error_message();
  expect_invalid(token_request({0, -5}, 8), "prompt_tokens");
  expect_still_serving();
}

TEST_F(BadRequests, OversizedPromptNamesPromptTokens) {
  expect_invalid(token_request(ids_of_length(600), 8), "prompt_tokens");
  // A prompt that fills the whole context leaves no room for a token either.
  v1::GenerateRequest full = token_request(ids_of_length(kMaxSeqLen), 1);
  full.mutable_stopping()->clear_max_new_tokens();
  expect_invalid(full, "prompt_tokens");
  expect_still_serving();
}

TEST_F(BadRequests, OtherOutOfRangeFieldsAreNamed) {
  v1::GenerateRequest r = text_request("Hello", 8);
  r.mutable_sampling()->set_top_p(std::numeric_limits<float>::quiet_NaN());
  expect_invalid(r, "sampling.top_p");
  r = text_request("Hello", 8);
  r.mutable_sampling()->set_min_p(2.0f);
  expect_invalid(r, "sampling.min_p");
  r = text_request("Hello", 8);
  r.mutable_sampling()->set_repetition_penalty(0.0f);
  expect_invalid(r, "sampling.repetition_penalty");
  r = text_request("Hello", 8);
  r.mutable_sampling()->set_presence_penalty(3.0f);
  expect_invalid(r, "sampling.presence_penalty");
  r = text_request("Hello", 8);
  r.mutable_sampling()->set_frequency_penalty(-2.5f);
  expect_invalid(r, "sampling.frequency_penalty");
  r = text_request("Hello", 8);
  r.mutable_sampling()->set_top_k(5000);
  expect_invalid(r, "sampling.top_k");
  r = text_request("Hello", 8);
  r.mutable_stopping()->add_stop_token_ids(4096);
  expect_invalid(r, "stopping.stop_token_ids");
  r = text_request("Hello", 8);
  r.mutable_stopping()->add_stop_strings("");
  expect_invalid(r, "stopping.stop_strings");
  expect_invalid(text_request(std::string(20000, 'a') + " long", 8), "prompt");
  expect_still_serving();
}

// The default request limits (--max-stop-strings 64, --max-stop-string-bytes 16384,
// --max-request-id-bytes 256): over them INVALID_ARGUMENT naming the field and the limit, at them
// the request runs.
TEST_F(BadRequests, HundredThousandStopStringsAreRefused) {
  v1::GenerateRequest r = text_request("Hello", 8);
  for (int i = 0; i < 100000; ++i) r.mutable_stopping()->add_stop_strings("s" + std::to_string(i));
  expect_invalid(r, "stopping.stop_strings");
  const StreamResult streamed = stream_generate(*stub_, r, seconds(10));
  EXPECT_NE(streamed.status.error_message().find("100000"), std::string::npos) << streamed.status.error_message();
  EXPECT_NE(streamed.status.error_message().find("--max-stop-strings"), std::string::npos)
      << streamed.status.error_message();
  r.mutable_stopping()->mutable_stop_strings()->DeleteSubrange(65, 100000 - 65);
  expect_invalid(r, "more than the limit of 64");
  expect_still_serving();
}

TEST_F(BadRequests, LargestAllowedStopStringSetRuns) {
  // 64 strings of 256 bytes: both defaults exactly; none occurs in the output.
  v1::GenerateRequest r = greedy(text_request("Hello there", 8));
  for (int i = 0; i < 64; ++i) r.mutable_stopping()->add_stop_strings(std::string(252, 'q') + std::to_string(1000 + i));
  const StreamResult at_limit = stream_generate(*stub_, r, seconds(30));
  ASSERT_TRUE(at_limit.status.ok()) << describe(at_limit.status);
  EXPECT_TRUE(at_limit.tokens.size() == 8u || at_limit.finish_reason == v1::FINISH_REASON_EOS);
  r.mutable_stopping()->mutable_stop_strings(0)->push_back('x');
  expect_invalid(r, "stopping.stop_strings hold 16385 bytes together, more than the limit of 16384 bytes");
  expect_still_serving();
}

TEST_F(BadRequests, LongRequestIdIsRefused) {
  v1::GenerateRequest r = greedy(text_request("Hello there", 4));
  r.set_request_id(std::string(256, 'r'));
  const StreamResult at_limit = stream_generate(*stub_, r, seconds(30));
  ASSERT_TRUE(at_limit.status.ok()) << describe(at_limit.status);
  EXPECT_EQ(at_limit.request_id, std::string(256, 'r'));
  r.set_request_id(std::string(257, 'r'));
  expect_invalid(r, "request_id is 257 bytes, more than the limit of 256 bytes (--max-request-id-bytes)");
  expect_still_serving();
}

TEST_F(BadRequests, PromptThatLeavesOneTokenFinishesWithContext) {
  v1::GenerateRequest r = greedy(token_request(ids_of_length(kMaxSeqLen - 1), 1));
  r.mutable_stopping()->clear_max_new_tokens();
  r.mutable_stopping()->set_ignore_eos(true);
  const StreamResult one = stream_generate(*stub_, r, seconds(30));
  ASSERT_TRUE(one.status.ok()) << describe(one.status);
  EXPECT_EQ(one.tokens.size(), 1u);
  EXPECT_EQ(one.finish_reason, v1::FINISH_REASON_CONTEXT);
  expect_still_serving();
}

TEST_F(BadRequests, PromptTokensWithAddBosGetBosPrepended) {
  // Unusual but valid: inference.proto lets add_bos prepend BOS to prompt_tokens as well.
  v1::GenerateRequest r = greedy(token_request({300, 301, 302}, 4));
  r.set_add_bos(true);
  const StreamResult with_bos = stream_generate(*stub_, r, seconds(30));
  ASSERT_TRUE(with_bos.status.ok()) << describe(with_bos.status);
  EXPECT_EQ(with_bos.usage.prompt_tokens(), 4);
  const StreamResult explicit_bos = stream_generate(*stub_, greedy(token_request({0, 300, 301, 302}, 4)), seconds(30));
  ASSERT_TRUE(explicit_bos.status.ok()) << describe(explicit_bos.status);
  EXPECT_EQ(with_bos.tokens, explicit_bos.tokens);
  expect_still_serving();
}

TEST_F(BadRequests, DetokenizeUnknownIdIsInvalidArgument) {
  std::string text;
  const grpc::Status bad = detokenize(*stub_, {5, 99999}, &text);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(bad);
  EXPECT_NE(bad.error_message().find("99999"), std::string::npos) << bad.error_message();
  const grpc::Status negative = detokenize(*stub_, {-1}, &text);
  EXPECT_EQ(negative.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(negative);
  const grpc::Status good = detokenize(*stub_, {34, 35}, &text);
  EXPECT_TRUE(good.ok()) << describe(good);
  EXPECT_EQ(text, "AB");
  expect_still_serving();
}

TEST_F(BadRequests, ClientDeadlineEndsTheCallAndTheServerDropsIt) {
  v1::GenerateRequest long_run = greedy(text_request("Once upon a time", 480));
  long_run.mutable_stopping()->set_ignore_eos(true);

  // 1 ms: the call ends before (or just after) it reaches the server.
  const StreamResult streamed = stream_generate(*stub_, long_run, milliseconds(1));
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << describe(streamed.status);
  {
    grpc::ClientContext context;
    set_timeout(context, milliseconds(1));
    v1::GenerateResponse response;
    const grpc::Status unary = stub_->GenerateUnary(&context, long_run, &response);
    EXPECT_EQ(unary.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << describe(unary);
  }
  // Long enough to be running on the server when the deadline passes: the server must notice the
  // cancellation and free the sequence rather than generate 480 tokens for nobody.
  const StreamResult midway = stream_generate(*stub_, long_run, milliseconds(700));
  EXPECT_EQ(midway.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << describe(midway.status);
  EXPECT_LT(midway.tokens.size(), 480u);
  expect_idle_within(seconds(5));
  expect_still_serving();
}

}  // namespace
}  // namespace exl3::testing
