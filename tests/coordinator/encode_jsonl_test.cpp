// encode_jsonl: {"text": ...} lines in, {"ids": [...]} lines out, errors naming the line.
#include "coordinator/tokenizer/tokenizer.h"

#include <sstream>
#include <string>

#include "coordinator/tokenizer_testing.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

using testing::qwen3_tokenizer;

TEST(EncodeJsonl, WritesOneIdsLinePerTextLine) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  std::istringstream in(
      "{\"text\": \"Hello world\"}\n"
      "\n"
      "{\"text\": \"<|im_start|>user\\n\", \"other\": 1}\n"
      "{\"text\": \"\"}\n");
  std::ostringstream out;
  ASSERT_TRUE(encode_jsonl(*qwen3_tokenizer(), in, out, /*parse_special=*/true).ok());
  EXPECT_EQ(out.str(),
            "{\"ids\":[9707,1879]}\n"
            "{\"ids\":[151644,872,198]}\n"
            "{\"ids\":[]}\n");
}

TEST(EncodeJsonl, ParseSpecialFalseTreatsMarkersAsText) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  std::istringstream in("{\"text\": \"<|im_start|>\"}\n");
  std::ostringstream out;
  ASSERT_TRUE(encode_jsonl(*qwen3_tokenizer(), in, out, /*parse_special=*/false).ok());
  EXPECT_EQ(out.str().find("151644"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().rfind("{\"ids\":[", 0), 0u) << out.str();
}

TEST(EncodeJsonl, ErrorsNameTheLine) {
  ASSERT_TRUE(qwen3_tokenizer().ok()) << qwen3_tokenizer().status();
  for (const char* input : {"{\"text\": \"a\"}\n{\"text\": 3}\n", "{\"text\": \"a\"}\n{\"text\": \"b\"\n",
                            "{\"text\": \"a\"}\n[\"b\"]\n", "{\"text\": \"a\"}\n{\"text\": 1e400}\n"}) {
    std::istringstream in(input);
    std::ostringstream out;
    const absl::Status status = encode_jsonl(*qwen3_tokenizer(), in, out, true);
    ASSERT_FALSE(status.ok()) << input;
    EXPECT_EQ(std::string(status.message()).rfind("line 2:", 0), 0u) << status;
  }
}

}  // namespace
}  // namespace exl3
