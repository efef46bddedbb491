// Admission of sampling.banned_strings: the proto's strings reach GenerateParams as given, the
// count and byte limits (--max-banned-strings, --max-banned-string-bytes) at and one over their
// values with field, value, limit and flag in the message, independent of the stop-string limits,
// and the flags refused when negative.
#include <string>
#include <vector>

#include "coordinator/server/request_admission.h"
#include "coordinator/server/request_limits.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

void expect_invalid(const absl::Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << p << " not in " << s;
}

TEST(BannedStringAdmission, ProtoStringsReachTheParams) {
  v1::GenerateRequest r;
  r.set_prompt("hi");
  r.mutable_sampling()->add_banned_strings("Dragon");
  r.mutable_sampling()->add_banned_strings("");
  const GenerateParams p = params_from_proto(r);
  EXPECT_EQ(p.sampling.banned_strings, (std::vector<std::string>{"Dragon", ""}));
}

TEST(BannedStringAdmission, CountAndBytesAtAndOverTheirLimits) {
  RequestLimits l;
  l.max_banned_strings = 3;
  l.max_banned_string_bytes = 10;
  l.max_stop_strings = 1;
  l.max_stop_string_bytes = 1;
  v1::GenerateRequest r;
  r.set_prompt("hi");
  for (const char* s : {"abc", "defg", "hij"}) r.mutable_sampling()->add_banned_strings(s);
  EXPECT_TRUE(check_request_size(r, l).ok()) << check_request_size(r, l);
  v1::GenerateRequest more = r;
  more.mutable_sampling()->add_banned_strings("");
  expect_invalid(check_request_size(more, l),
                 {"sampling.banned_strings has 4 strings", "limit of 3", "--max-banned-strings"});
  v1::GenerateRequest longer = r;
  longer.mutable_sampling()->set_banned_strings(2, "hijk");
  expect_invalid(check_request_size(longer, l),
                 {"sampling.banned_strings hold 11 bytes", "limit of 10 bytes", "--max-banned-string-bytes"});
  const auto defaults = resolve_request_limits(RequestLimits{}, 4096);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->max_banned_strings, 64);
  EXPECT_EQ(defaults->max_banned_string_bytes, 16384);
  RequestLimits negative;
  negative.max_banned_strings = -1;
  expect_invalid(resolve_request_limits(negative, 4096).status(), {"--max-banned-strings", ">= 0"});
  negative = RequestLimits{};
  negative.max_banned_string_bytes = -1;
  expect_invalid(resolve_request_limits(negative, 4096).status(), {"--max-banned-string-bytes", ">= 0"});
  // The message size bound grows with the banned-string limits.
  RequestLimits big;
  big.max_banned_string_bytes = 64 << 20;
  EXPECT_GE(max_request_message_bytes(big), max_request_message_bytes(RequestLimits{}) + (60 << 20));
}

}  // namespace
}  // namespace exl3
