// The tokenizer's UTF-8 helpers and byte-level alphabet: well-formedness per Unicode Table 3-7,
// one U+FFFD per maximal invalid subpart, and the 256-character byte alphabet.
#include <string>

#include "coordinator/tokenizer/byte_level.h"
#include "coordinator/tokenizer/utf8.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(TokenizerUtf8, ValidSequences) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("ascii \x7f"));
  EXPECT_TRUE(utf8::is_valid("\xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEF\xBF\xBF"));
  EXPECT_TRUE(utf8::is_valid("\xF0\x90\x80\x80 \xF4\x8F\xBF\xBF"));
}

TEST(TokenizerUtf8, InvalidSequences) {
  EXPECT_FALSE(utf8::is_valid("\xC0\x80"));          // overlong
  EXPECT_FALSE(utf8::is_valid("\xE0\x9F\xBF"));      // overlong
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::is_valid("\xF0\x9F\x98"));      // unfinished
  EXPECT_FALSE(utf8::is_valid("\x80"));
}

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::lossy("a\xF0\x9F\x98" "b"), "a" + kFffd + "b");          // one subpart
  EXPECT_EQ(utf8::lossy("\xC0\x80"), kFffd + kFffd);                        // C0 never starts one
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);           // surrogate bytes
  EXPECT_EQ(utf8::lossy("\xE2\x82"), kFffd);                                // unfinished at the end
  EXPECT_EQ(utf8::lossy("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
}

TEST(TokenizerUtf8, StepReportsIncompleteTail) {
  const utf8::Step st = utf8::step("\xF0\x9F\x98", 0);
  EXPECT_EQ(st.kind, utf8::StepKind::kIncomplete);
  EXPECT_EQ(st.length, 3u);
}

TEST(TokenizerByteLevel, AlphabetRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string spelled = byte_level::encode(all);
  EXPECT_TRUE(utf8::is_valid(spelled));
  EXPECT_EQ(byte_level::decode(spelled), all);
  EXPECT_EQ(byte_level::char_of(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_level::char_of('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_level::char_of('A'), "A");
  EXPECT_EQ(byte_level::char_of(0xAD), "\xC5\x83");  // U+0143, the last remapped byte
  EXPECT_FALSE(byte_level::decode("a b").has_value());  // a raw space is not in the alphabet
}

}  // namespace
}  // namespace exl3
