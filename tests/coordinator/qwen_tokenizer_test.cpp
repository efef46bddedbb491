// The Qwen 3 tokenizer (NFC normalizer, its own Split regex, special and non-special added
// tokens): round trips on excerpts of ../shared/data/text (multilingual, emoji, code) and
// encodings checked by hand against its vocabulary (e.g. "Hello" = 9707, "Ġworld" = 1879).
#include <algorithm>
#include <string>
#include <vector>

#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer_testing.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

using testing::qwen3_tokenizer;

constexpr int32_t kEndOfText = 151643;
constexpr int32_t kImStart = 151644;
constexpr int32_t kImEnd = 151645;
constexpr int32_t kThink = 151667;  // an added token that is not special

// Excerpts of multilingual.utf8 and code.utf8 (all already in NFC).
const char* const kExcerpts[] = {
    "A war broke out between the Birds and Beasts after the Geese had suffered persecution at the "
    "hands of the Foxes, and the Eagle and Owl had hunted Hare and Mice.",
    "鹅遭到狐狸的迫害，老鹰和猫头鹰猎杀了野兔和老鼠，鸟类和野兽之间爆发了战争。 这场战斗是灾难性的，许多生物死亡。",
    "Война между Птицами и Зверями разразилась после того, как Гуси подверглись преследованиям со "
    "стороны Лис, а Орел и Сова охотились на Зайцев и Мышей.",
    "اندلعت حرب بين الطيور والوحوش بعد أن عانى الإوز من الاضطهاد على يد الثعالب، وقام النسر والبومة باصطياد الأرنب والفئران.",
    "Οι New York Times τύπωσαν την Πέμπτη μια ειδική ενότητα με πορτρέτα σχεδόν κάθε μέλους",
    "🌟【30秒爆款脚本-飞天金鹅篇】🌟\n🌶️画面1（0-3秒）：第一视角镜头穿过雾气推开木门，案板上剁鹅刀\"咚\"地入木三分（音效：刀鸣声+鹅鸣）",
    "    username = \"User\"\n\n    def __init__(self):\n        pass\n\n    #\n\n"
    "    def default_system_prompt(self):\n        raise NotImplementedError\n",
    "          move.w    #$0100,d0\n          clr.l     d1\n\nNotReached:\n\n"
    "          addi.b    #$10,d2\n\tinitial\n\tbegin\n\t\t$display (\"RESULT\\ta\\ty\");\n",
    "#include <torch/extension.h>\n#include <c10/cuda/CUDAGuard.h>\r\n  x += 1234567;  // 3.14159\n",
};

TEST(QwenTokenizer, Loads) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  const Tokenizer& tokenizer = *qwen3_tokenizer();
  EXPECT_EQ(tokenizer.vocab_size(), 151669);
  EXPECT_TRUE(tokenizer.is_special(kImStart));
  EXPECT_FALSE(tokenizer.is_special(kThink));
  EXPECT_EQ(tokenizer.token_text(kImEnd), "<|im_end|>");
  EXPECT_EQ(tokenizer.token_id("<|endoftext|>"), kEndOfText);
}

TEST(QwenTokenizer, ExcerptsRoundTrip) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  const Tokenizer& tokenizer = *qwen3_tokenizer();
  for (const char* text : kExcerpts) {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    EXPECT_FALSE(ids.empty());
    for (int32_t id : ids) EXPECT_FALSE(tokenizer.is_special(id)) << id;
    EXPECT_EQ(tokenizer.decode(ids), text);
  }
}

TEST(QwenTokenizer, HandCheckedEncodings) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  const Tokenizer& tokenizer = *qwen3_tokenizer();
  // Every piece below is a whole vocabulary token: "Hello" 9707, "Ġworld" 1879, "user" 872,
  // "assistant" 77091, "Ċ" 198, "Hi" 13048.
  EXPECT_EQ(tokenizer.encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  EXPECT_EQ(tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
            (std::vector<int32_t>{kImStart, 872, 198, 13048, kImEnd, 198, kImStart, 77091, 198}));
  EXPECT_EQ(tokenizer.encode("<|endoftext|>"), (std::vector<int32_t>{kEndOfText}));
}

TEST(QwenTokenizer, ParseSpecialOffKeepsNonSpecialAddedTokens) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  const Tokenizer& tokenizer = *qwen3_tokenizer();
  const std::string text = "<|im_start|><think>x</think>";
  const std::vector<int32_t> plain = tokenizer.encode(text, /*parse_special=*/false);
  for (int32_t id : plain) EXPECT_FALSE(tokenizer.is_special(id)) << id;
  ASSERT_FALSE(plain.empty());
  EXPECT_NE(plain.front(), kImStart);
  EXPECT_NE(std::find(plain.begin(), plain.end(), kThink), plain.end());
  EXPECT_EQ(tokenizer.decode(plain), text);
  EXPECT_EQ(tokenizer.encode(text).front(), kImStart);
}

TEST(QwenTokenizer, NormalizesToNfc) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  const Tokenizer& tokenizer = *qwen3_tokenizer();
  // "e" + U+0301 COMBINING ACUTE ACCENT composes to U+00E9.
  EXPECT_EQ(tokenizer.encode("caf" "e\xCC\x81"), tokenizer.encode("caf\xC3\xA9"));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("caf" "e\xCC\x81")), "caf\xC3\xA9");
}

TEST(QwenTokenizer, DigitsSplitOneByOne) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  const Tokenizer& tokenizer = *qwen3_tokenizer();
  // Qwen's pattern has \p{N} alone (Llama 3's has \p{N}{1,3}): one token per digit.
  const std::vector<int32_t> ids = tokenizer.encode("12345");
  ASSERT_EQ(ids.size(), 5u);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tokenizer.token_text(ids[i]), std::string(1, "12345"[i]));
}

}  // namespace
}  // namespace exl3
