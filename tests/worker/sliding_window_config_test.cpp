// config.json's sliding window: MistralForCausalLM reads `sliding_window` (every layer; null or
// absent = off; a non-positive or non-integer value is refused by name); Qwen2 keeps refusing
// use_sliding_window = true (it applies the window per layer) and ignores sliding_window when
// use_sliding_window is false; Llama has no window.
#include "gtest/gtest.h"
#include "worker/model/config.h"

namespace exl3 {
namespace {

std::string config(const std::string& architecture, const std::string& extra) {
  return R"({"architectures": [")" + architecture + R"("], "hidden_size": 512, "intermediate_size": 1536,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 4096)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(SlidingWindowConfig, MistralReadsTheWindow) {
  const struct {
    const char* extra;
    int64_t window;
  } cases[] = {{R"("sliding_window": 4096)", 4096},
               {R"("sliding_window": 16)", 16},
               {R"("sliding_window": null)", 0},
               {"", 0},
               {R"("sliding_window": 1)", 1}};
  for (const auto& c : cases) {
    auto parsed = parse_model_config(config("MistralForCausalLM", c.extra), "config.json");
    ASSERT_TRUE(parsed.ok()) << c.extra << ": " << parsed.status();
    EXPECT_EQ(parsed->sliding_window, c.window) << c.extra;
  }
}

TEST(SlidingWindowConfig, MistralRefusesBadWindows) {
  for (const char* extra : {R"("sliding_window": 0)", R"("sliding_window": -5)", R"("sliding_window": "4096")",
                            R"("sliding_window": 4096.5)"}) {
    auto parsed = parse_model_config(config("MistralForCausalLM", extra), "config.json");
    ASSERT_FALSE(parsed.ok()) << extra;
    EXPECT_NE(std::string(parsed.status().message()).find("sliding_window"), std::string::npos) << parsed.status();
  }
}

TEST(SlidingWindowConfig, Qwen2AndLlamaHaveNoWindow) {
  auto qwen = parse_model_config(config("Qwen2ForCausalLM", R"("use_sliding_window": false, "sliding_window": 131072)"),
                                 "config.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->sliding_window, 0);
  auto refused = parse_model_config(config("Qwen2ForCausalLM", R"("use_sliding_window": true, "sliding_window": 4096)"),
                                    "config.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("use_sliding_window"), std::string::npos);
  auto llama = parse_model_config(config("LlamaForCausalLM", R"("sliding_window": 16)"), "config.json");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->sliding_window, 0);
}

}  // namespace
}  // namespace exl3
