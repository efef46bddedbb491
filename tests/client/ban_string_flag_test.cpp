// exl3-client's --ban-string: every string reaches SamplingParams.banned_strings as given, in order.
#include <string>
#include <vector>

#include "client/request_builder.h"
#include "gtest/gtest.h"

namespace exl3::client {
namespace {

TEST(BuildGenerateRequest, PassesBannedStrings) {
  GenerateOptions o;
  o.prompt = "Once upon a time";
  o.banned_strings = {"dragon", " The End", "\xc3\xa9t\xc3\xa9"};
  auto request = build_generate_request(o);
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->sampling().banned_strings_size(), 3);
  EXPECT_EQ(request->sampling().banned_strings(0), "dragon");
  EXPECT_EQ(request->sampling().banned_strings(1), " The End");
  EXPECT_EQ(request->sampling().banned_strings(2), "\xc3\xa9t\xc3\xa9");
  GenerateOptions none;
  none.prompt = "x";
  auto plain = build_generate_request(none);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->sampling().banned_strings_size(), 0);
}

}  // namespace
}  // namespace exl3::client
