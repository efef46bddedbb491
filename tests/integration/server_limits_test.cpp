// Request limits set by flags on a launched server (--max-stop-strings 3, --max-stop-string-bytes
// 12, --max-prompt-bytes 64, --max-prompt-tokens 40, --max-new-tokens 24, --max-request-id-bytes
// 8): a request at each limit runs; one over it is refused by Generate and GenerateUnary with
// INVALID_ARGUMENT whose message names the field, the value, the limit and the flag; the server
// keeps serving. An unset max_new_tokens is capped by --max-new-tokens (finish reason LENGTH).
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

class ServerLimits : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.max_seq_len = 512;
    config.max_batch = 4;
    config.log_name = "server_limits";
    config.extra_args = {"--max-stop-strings", "3",  "--max-stop-string-bytes", "12", "--max-prompt-bytes", "64",
                         "--max-prompt-tokens", "40", "--max-new-tokens",       "24", "--max-request-id-bytes", "8"};
    start_server(config);
  }

  void SetUp() override {
    ServerSuite::SetUp();
    if (!HasFatalFailure()) stub_ = server().stub();
  }

  // Generate and GenerateUnary both refuse `request` with INVALID_ARGUMENT whose message contains
  // every one of `parts`.
  void expect_refused(const v1::GenerateRequest& request, const std::vector<std::string>& parts) {
    const StreamResult streamed = stream_generate(*stub_, request, seconds(10));
    EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(streamed.status);
    EXPECT_EQ(streamed.messages, 0);
    grpc::ClientContext context;
    set_timeout(context, seconds(10));
    v1::GenerateResponse response;
    const grpc::Status unary = stub_->GenerateUnary(&context, request, &response);
    EXPECT_EQ(unary.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(unary);
    for (const std::string& part : parts) {
      EXPECT_NE(streamed.status.error_message().find(part), std::string::npos)
          << "\"" << part << "\" not in: " << streamed.status.error_message();
      EXPECT_NE(unary.error_message().find(part), std::string::npos)
          << "\"" << part << "\" not in: " << unary.error_message();
    }
  }

  // The request runs to its end.
  StreamResult expect_runs(const v1::GenerateRequest& request) {
    StreamResult r = stream_generate(*stub_, request, seconds(60));
    EXPECT_TRUE(r.status.ok()) << describe(r.status);
    EXPECT_TRUE(r.has_usage);
    return r;
  }

  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(ServerLimits, StopStringCount) {
  v1::GenerateRequest r = greedy(text_request("Hello", 4));
  for (const char* s : {"qq", "zz", "xx"}) r.mutable_stopping()->add_stop_strings(s);
  expect_runs(r);
  r.mutable_stopping()->add_stop_strings("vv");
  expect_refused(r, {"stopping.stop_strings", "has 4 strings", "limit of 3", "--max-stop-strings"});
}

TEST_F(ServerLimits, StopStringBytes) {
  v1::GenerateRequest r = greedy(text_request("Hello", 4));
  for (const char* s : {"qqqq", "zzzz", "xxxx"}) r.mutable_stopping()->add_stop_strings(s);  // 12 bytes
  expect_runs(r);
  r.mutable_stopping()->mutable_stop_strings(1)->push_back('z');
  expect_refused(r, {"stopping.stop_strings", "13 bytes", "limit of 12 bytes", "--max-stop-string-bytes"});
}

TEST_F(ServerLimits, PromptBytes) {
  const std::string at_limit = "The quick brown fox jumps over the lazy dog while the cat sleeps";  // 64 bytes
  ASSERT_EQ(at_limit.size(), 64u);
  expect_runs(greedy(text_request(at_limit, 4)));
  expect_refused(greedy(text_request(at_limit + ".", 4)),
                 {"prompt is 65 bytes", "limit of 64 bytes", "--max-prompt-bytes"});
  // Tokenize's text has the same limit.
  std::vector<int32_t> ids;
  EXPECT_TRUE(tokenize(*stub_, at_limit, &ids).ok());
  const grpc::Status over = tokenize(*stub_, at_limit + ".", &ids);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(over);
  EXPECT_NE(over.error_message().find("text is 65 bytes"), std::string::npos) << over.error_message();
}

TEST_F(ServerLimits, PromptTokens) {
  std::vector<int32_t> ids(40);
  for (int i = 0; i < 40; ++i) ids[static_cast<size_t>(i)] = 300 + i;
  expect_runs(greedy(token_request(ids, 4)));
  ids.push_back(340);
  expect_refused(greedy(token_request(ids, 4)),
                 {"prompt_tokens is 41 tokens", "limit of 40 tokens", "--max-prompt-tokens"});
  // A text prompt within the byte limit but over the token limit (BOS counted).
  // 21 CJK characters of 3 bytes each: the fixture's 4096-token vocabulary spells them in bytes.
  std::string text;
  for (int i = 0; i < 21; ++i) text += "\u9f98";
  ASSERT_LE(text.size(), 64u);
  std::vector<int32_t> text_ids;
  ASSERT_TRUE(tokenize(*stub_, text, &text_ids).ok());
  ASSERT_GT(text_ids.size(), 40u) << "the fixture's tokenizer merges more than this test assumes";
  expect_refused(greedy(text_request(text, 4)),
                 {"prompt is " + std::to_string(text_ids.size()) + " tokens", "limit of 40 tokens"});
}

TEST_F(ServerLimits, MaxNewTokens) {
  v1::GenerateRequest r = greedy(text_request("Once upon a time", 24));
  r.mutable_stopping()->set_ignore_eos(true);
  EXPECT_EQ(expect_runs(r).tokens.size(), 24u);
  r.mutable_stopping()->set_max_new_tokens(25);
  expect_refused(r, {"stopping.max_new_tokens = 25", "limit of 24", "--max-new-tokens"});
  // Unset: up to the context would be 500 tokens; the flag caps it at 24, a LENGTH finish.
  r.mutable_stopping()->clear_max_new_tokens();
  const StreamResult capped = expect_runs(r);
  EXPECT_EQ(capped.tokens.size(), 24u);
  EXPECT_EQ(capped.finish_reason, v1::FINISH_REASON_LENGTH);
}

TEST_F(ServerLimits, RequestIdBytes) {
  v1::GenerateRequest r = greedy(text_request("Hello", 2));
  r.set_request_id("12345678");
  EXPECT_EQ(expect_runs(r).request_id, "12345678");
  r.set_request_id("123456789");
  expect_refused(r, {"request_id is 9 bytes", "limit of 8 bytes", "--max-request-id-bytes"});
}

}  // namespace
}  // namespace exl3::testing
