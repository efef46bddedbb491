// RegexSplitter: "Isolated" splitting (matches and the gaps between them), invalid UTF-8 kept in
// gaps, literal patterns, empty matches, and the Oniguruma-compatible treatment of U+180E.
#include "coordinator/tokenizer/regex_splitter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace exl3 {
namespace {

std::vector<std::string> split(std::string_view pattern, std::string_view text, bool literal = false) {
  absl::StatusOr<RegexSplitter> splitter = RegexSplitter::compile(pattern, literal);
  EXPECT_TRUE(splitter.ok()) << splitter.status();
  if (!splitter.ok()) return {};
  RegexScratch scratch;
  std::vector<std::string_view> pieces;
  splitter->split(text, scratch, pieces);
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

// Llama 3's pre-tokenizer pattern.
constexpr std::string_view kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

TEST(RegexSplitter, Llama3PatternPieces) {
  EXPECT_EQ(split(kLlama3, "Hello world's 12345"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", "123", "45"}));
  EXPECT_EQ(split(kLlama3, "I'LL go  now\n\n  ok"),
            (std::vector<std::string>{"I", "'LL", " go", " ", " now", "\n\n", " ", " ok"}));
}

TEST(RegexSplitter, GapsBecomePieces) {
  EXPECT_EQ(split("\\d+", "ab12cd3"), (std::vector<std::string>{"ab", "12", "cd", "3"}));
  EXPECT_EQ(split("\\d+", "none"), (std::vector<std::string>{"none"}));
  EXPECT_TRUE(split("\\d+", "").empty());
}

TEST(RegexSplitter, InvalidUtf8StaysInGaps) {
  EXPECT_EQ(split("\\p{L}+", "ab\xFF\xC3(cd"), (std::vector<std::string>{"ab", "\xFF\xC3(", "cd"}));
}

TEST(RegexSplitter, LiteralPattern) {
  EXPECT_EQ(split("a.b", "xa.bya+b", /*literal=*/true), (std::vector<std::string>{"x", "a.b", "ya+b"}));
}

TEST(RegexSplitter, EmptyMatchesAddNothing) {
  EXPECT_EQ(split("x*", "axxb"), (std::vector<std::string>{"a", "xx", "b"}));
}

TEST(RegexSplitter, MongolianVowelSeparatorIsNotWhitespace) {
  // Oniguruma (Hugging Face) does not count U+180E as \s; PCRE2 alone would.
  EXPECT_EQ(split("\\s+|\\S+", "a\xE1\xA0\x8E" "b c"), (std::vector<std::string>{"a\xE1\xA0\x8E" "b", " ", "c"}));
  EXPECT_EQ(split("\\s+|\\S+", "a\xE2\x80\x83" "b"), (std::vector<std::string>{"a", "\xE2\x80\x83", "b"}));
}

TEST(RegexSplitter, BadPatternIsAnError) {
  const absl::StatusOr<RegexSplitter> splitter = RegexSplitter::compile("[a-", false);
  ASSERT_FALSE(splitter.ok());
  EXPECT_NE(std::string(splitter.status().message()).find("[a-"), std::string::npos);
}

}  // namespace
}  // namespace exl3
