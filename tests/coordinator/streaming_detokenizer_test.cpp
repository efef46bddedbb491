// StreamingDetokenizer: one id at a time, only whole UTF-8 characters come out, and the pieces
// add up to the full text (multilingual text and emoji, whose bytes span several tokens).
#include "coordinator/tokenizer/streaming_detokenizer.h"

#include <string>
#include <vector>

#include "coordinator/tokenizer/utf8.h"
#include "coordinator/tokenizer_testing.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

using testing::llama3_tokenizer;
using testing::qwen3_tokenizer;

const char* const kTexts[] = {
    "Hello, world! Grüße aus Köln. 日本語のテキスト。",
    "🌟【30秒爆款脚本-飞天金鹅篇】🌟 👩‍👩‍👧‍👦 🏳️‍🌈 🇯🇵",
    "Война и мир — اندلعت حرب — Πέμπτη — ∑ᵢ xᵢ² ≤ ∞",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 🀄 \t\n end",
};

// Returns how many pushes left bytes held back (a character split across tokens).
int expect_streams_exactly(const Tokenizer& tokenizer, const std::string& text) {
  const std::vector<int32_t> ids = tokenizer.encode(text);
  StreamingDetokenizer stream(tokenizer);
  std::string joined;
  int held = 0;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(utf8::is_valid(piece)) << "partial UTF-8 emitted for id " << id;
    if (stream.pending_bytes() > 0) ++held;
    joined += piece;
  }
  EXPECT_EQ(stream.pending_bytes(), 0u);
  joined += stream.flush();
  EXPECT_EQ(joined, text);
  EXPECT_EQ(joined, tokenizer.decode(ids));
  return held;
}

TEST(StreamingDetokenizer, Llama3StreamsMultilingualTextExactly) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  int held = 0;
  for (const char* text : kTexts) held += expect_streams_exactly(*llama3_tokenizer(), text);
  EXPECT_GT(held, 0) << "no character was split across tokens; the test proves little";
}

TEST(StreamingDetokenizer, QwenStreamsMultilingualTextExactly) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  int held = 0;
  for (const char* text : kTexts) held += expect_streams_exactly(*qwen3_tokenizer(), text);
  EXPECT_GT(held, 0) << "no character was split across tokens; the test proves little";
}

TEST(StreamingDetokenizer, HoldsASplitCharacterUntilComplete) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  const Tokenizer& tokenizer = *llama3_tokenizer();
  // U+1F600 is F0 9F 98 80; feed it as four single-byte tokens.
  const std::string emoji = "\xF0\x9F\x98\x80";
  StreamingDetokenizer stream(tokenizer);
  for (size_t i = 0; i < emoji.size(); ++i) {
    const std::vector<int32_t> byte_id = tokenizer.encode(std::string(1, emoji[i]));
    ASSERT_EQ(byte_id.size(), 1u);
    const std::string piece = stream.push(byte_id[0]);
    if (i + 1 < emoji.size()) {
      EXPECT_EQ(piece, "");
      EXPECT_EQ(stream.pending_bytes(), i + 1);
    } else {
      EXPECT_EQ(piece, emoji);
    }
  }
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamingDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  const Tokenizer& tokenizer = *llama3_tokenizer();
  const auto byte_token = [&](char byte) {
    const std::vector<int32_t> ids = tokenizer.encode(std::string(1, byte));
    EXPECT_EQ(ids.size(), 1u);
    return ids.at(0);
  };
  StreamingDetokenizer stream(tokenizer);
  // A stray continuation byte can never become valid: replaced at once.
  EXPECT_EQ(stream.push(byte_token('\x80')), "\xEF\xBF\xBD");
  // A lead byte followed by ASCII: the unfinished character is replaced, the ASCII kept.
  EXPECT_EQ(stream.push(byte_token('\xE2')), "");
  EXPECT_EQ(stream.push(byte_token('a')), "\xEF\xBF\xBD" "a");
  // Unfinished at the end of the stream: flush replaces it.
  EXPECT_EQ(stream.push(byte_token('\xE2')), "");
  EXPECT_EQ(stream.push(byte_token('\x82')), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.pending_bytes(), 0u);
}

TEST(StreamingDetokenizer, SkipsSpecialTokensWhenAsked) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  const Tokenizer& tokenizer = *qwen3_tokenizer();
  const std::vector<int32_t> ids = tokenizer.encode("<|im_start|>assistant\nOK<|im_end|>");
  StreamingDetokenizer keep(tokenizer);
  StreamingDetokenizer skip(tokenizer, /*skip_special=*/true);
  std::string kept;
  std::string skipped;
  for (int32_t id : ids) {
    kept += keep.push(id);
    skipped += skip.push(id);
  }
  EXPECT_EQ(kept + keep.flush(), "<|im_start|>assistant\nOK<|im_end|>");
  EXPECT_EQ(skipped + skip.flush(), "assistant\nOK");
}

}  // namespace
}  // namespace exl3
