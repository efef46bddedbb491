// Unit tests of request_limits.h and the file handling of server_credentials.h (no server): limits
// resolved against the context, every size check at and one over its limit with the field, value,
// limit and flag in the message, the in-flight counter per connection and in total, token and PEM
// files refused by flag and path. (Here rather than tests/coordinator because this area links
// exl3_coordinator_server.)
#include "coordinator/server/request_limits.h"

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/server/server_credentials.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

RequestLimits small_limits() {
  RequestLimits l;
  l.max_stop_strings = 3;
  l.max_stop_string_bytes = 10;
  l.max_prompt_bytes = 20;
  l.max_prompt_tokens = 5;
  l.max_new_tokens = 7;
  l.max_request_id_bytes = 4;
  return l;
}

v1::GenerateRequest text(const std::string& prompt) {
  v1::GenerateRequest r;
  r.set_prompt(prompt);
  return r;
}

void expect_invalid(const absl::Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << p << " not in " << s;
}

TEST(RequestLimits, ResolvedAgainstTheContext) {
  absl::StatusOr<RequestLimits> r = resolve_request_limits(RequestLimits{}, 2048);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_prompt_tokens, 2048);
  EXPECT_EQ(r->max_new_tokens, 2048);
  EXPECT_EQ(r->max_stop_strings, 64);
  EXPECT_EQ(r->max_stop_string_bytes, 16384);
  EXPECT_EQ(r->max_prompt_bytes, 4 << 20);
  EXPECT_EQ(r->max_request_id_bytes, 256);
  EXPECT_EQ(r->max_requests, 1024);
  EXPECT_EQ(r->max_requests_per_connection, 256);
  RequestLimits over;
  over.max_new_tokens = 2049;
  expect_invalid(resolve_request_limits(over, 2048).status(), {"--max-new-tokens 2049", "2048", "--max-seq-len"});
  over = RequestLimits{};
  over.max_prompt_tokens = 4096;
  expect_invalid(resolve_request_limits(over, 2048).status(), {"--max-prompt-tokens 4096"});
  over = RequestLimits{};
  over.max_requests = 0;
  expect_invalid(resolve_request_limits(over, 2048).status(), {"--max-requests must be >= 1, got 0"});
  // The receive size covers the largest allowed request.
  EXPECT_GE(max_request_message_bytes(*r), (4 << 20) + 16384 + 5 * 2048);
}

TEST(RequestLimits, EachSizeAtAndOverItsLimit) {
  const RequestLimits l = small_limits();
  v1::GenerateRequest r = text(std::string(20, 'p'));
  r.set_request_id("abcd");
  for (const char* s : {"abc", "def", "ghij"}) r.mutable_stopping()->add_stop_strings(s);
  r.mutable_stopping()->set_max_new_tokens(7);
  EXPECT_TRUE(check_request_size(r, l).ok()) << check_request_size(r, l);

  v1::GenerateRequest over = r;
  over.set_request_id("abcde");
  expect_invalid(check_request_size(over, l), {"request_id is 5 bytes", "limit of 4 bytes", "--max-request-id-bytes"});
  over = r;
  over.mutable_stopping()->add_stop_strings("k");
  expect_invalid(check_request_size(over, l), {"stopping.stop_strings has 4 strings", "limit of 3", "--max-stop-strings"});
  over = r;
  over.mutable_stopping()->mutable_stop_strings(0)->push_back('x');
  expect_invalid(check_request_size(over, l), {"stopping.stop_strings hold 11 bytes", "limit of 10 bytes"});
  over = r;
  over.mutable_stopping()->set_max_new_tokens(8);
  expect_invalid(check_request_size(over, l), {"stopping.max_new_tokens = 8", "limit of 7", "--max-new-tokens"});
  over = r;
  over.set_prompt(std::string(21, 'p'));
  expect_invalid(check_request_size(over, l), {"prompt is 21 bytes", "limit of 20 bytes", "--max-prompt-bytes"});

  v1::GenerateRequest tokens;
  for (int i = 0; i < 5; ++i) tokens.mutable_prompt_tokens()->add_ids(i);
  EXPECT_TRUE(check_request_size(tokens, l).ok());
  tokens.mutable_prompt_tokens()->add_ids(5);
  expect_invalid(check_request_size(tokens, l), {"prompt_tokens is 6 tokens", "limit of 5 tokens", "--max-prompt-tokens"});
  EXPECT_TRUE(check_prompt_tokens(5, "prompt", l).ok());
  expect_invalid(check_prompt_tokens(6, "prompt", l), {"prompt is 6 tokens"});

  v1::TokenizeRequest t;
  t.set_text(std::string(20, 't'));
  EXPECT_TRUE(check_tokenize_size(t, l).ok());
  t.set_text(std::string(21, 't'));
  expect_invalid(check_tokenize_size(t, l), {"text is 21 bytes"});
}

TEST(RequestLimits, HundredThousandStopStrings) {
  v1::GenerateRequest r = text("Hello");
  const std::string stop = "s";
  for (int i = 0; i < 100000; ++i) *r.mutable_stopping()->add_stop_strings() = stop;
  const RequestLimits defaults = *resolve_request_limits(RequestLimits{}, 512);
  expect_invalid(check_request_size(r, defaults), {"stopping.stop_strings has 100000 strings", "limit of 64"});
}

TEST(InFlightRequests, PerConnectionThenTotal) {
  InFlightRequests in_flight(3, 2);
  std::vector<InFlightRequests::Slot> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<InFlightRequests::Slot> s = in_flight.acquire("ipv4:127.0.0.1:1000");
    ASSERT_TRUE(s.ok()) << s.status();
    held.push_back(*std::move(s));
  }
  absl::StatusOr<InFlightRequests::Slot> third = in_flight.acquire("ipv4:127.0.0.1:1000");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("ipv4:127.0.0.1:1000"), std::string::npos) << third.status();
  EXPECT_NE(third.status().message().find("--max-requests-per-connection 2"), std::string::npos) << third.status();
  {
    absl::StatusOr<InFlightRequests::Slot> other = in_flight.acquire("ipv4:127.0.0.1:2000");
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(in_flight.total(), 3);
    absl::StatusOr<InFlightRequests::Slot> fourth = in_flight.acquire("ipv4:127.0.0.1:3000");
    EXPECT_EQ(fourth.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(fourth.status().message().find("--max-requests 3"), std::string::npos) << fourth.status();
  }
  EXPECT_EQ(in_flight.total(), 2);
  EXPECT_EQ(in_flight.for_connection("ipv4:127.0.0.1:2000"), 0);
  held.clear();
  EXPECT_EQ(in_flight.total(), 0);
  EXPECT_EQ(in_flight.for_connection("ipv4:127.0.0.1:1000"), 0);
  // 0 = no per-connection limit.
  InFlightRequests total_only(4, 0);
  std::vector<InFlightRequests::Slot> four;
  for (int i = 0; i < 4; ++i) four.push_back(*total_only.acquire("same"));
  EXPECT_FALSE(total_only.acquire("same").ok());
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(EXL3_TEST_WORK_DIR, "/", name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

TEST(ServerCredentials, TokenFile) {
  absl::StatusOr<std::string> t = read_token_file(write_file("unit_token", "  abc-123\n"), "--auth-token-file");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "abc-123");
  const std::string empty = write_file("unit_token_empty", " \n\t");
  expect_invalid(read_token_file(empty, "--auth-token-file").status(), {absl::StrCat("--auth-token-file ", empty), "no token"});
  expect_invalid(read_token_file("/nonexistent/token", "--auth-token-file").status(),
                 {"--auth-token-file /nonexistent/token: cannot read"});
  expect_invalid(read_token_file(write_file("unit_token_space", "a b"), "--auth-token-file").status(),
                 {"printable ASCII without spaces"});
}

TEST(ServerCredentials, TlsFiles) {
  const std::string dir = absl::StrCat(EXL3_TEST_DATA_DIR, "/tls/");
  const std::string cert = absl::StrCat(dir, "server.pem"), key = absl::StrCat(dir, "server.key");
  absl::StatusOr<PublicApiSecurity> s = load_public_api_security("", cert, key);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->tls());
  EXPECT_TRUE(s->auth_token.empty());
  EXPECT_TRUE(public_api_credentials(*s) != nullptr);
  absl::StatusOr<PublicApiSecurity> none = load_public_api_security("", "", "");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->tls());
  expect_invalid(load_public_api_security("", cert, "").status(), {"go together"});
  expect_invalid(load_public_api_security("", "", key).status(), {"go together"});
  expect_invalid(load_public_api_security("", key, key).status(),
                 {absl::StrCat("--tls-cert ", dir, "server.key: no PEM certificate")});
  expect_invalid(load_public_api_security("", cert, absl::StrCat(dir, "ca.pem")).status(),
                 {absl::StrCat("--tls-key ", dir, "ca.pem: no PEM private key")});
}

}  // namespace
}  // namespace exl3
