// config.json parsing: supported architectures and RoPE forms, and clear errors for bad files.
#include "worker/model/config.h"

#include "gtest/gtest.h"

namespace exl3 {
namespace {

const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 512, "intermediate_size": 1536,
  "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 4096,
  "rms_norm_eps": 1e-5, "max_position_embeddings": 2048, "bos_token_id": 0, "eos_token_id": [1, 2],
  "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}})";

std::string with(const std::string& base, const std::string& key_value) {
  return base.substr(0, base.size() - 1) + ", " + key_value + "}";
}

TEST(ModelConfig, ParsesTransformers5Config) {
  auto c = parse_model_config(kLlama, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);  // only inside rope_parameters
  EXPECT_EQ(c->rope.type, RopeType::kDefault);
  EXPECT_EQ(c->bos_token_id, 0);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(ModelConfig, ParsesOldStyleRopeScalingAndExplicitHeadDim) {
  const std::string old_style = R"({
    "architectures": ["MistralForCausalLM"], "hidden_size": 512, "intermediate_size": 1536,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "head_dim": 96,
    "rope_theta": 1000000.0, "rope_scaling": {"type": "linear", "factor": 2.0}, "tie_word_embeddings": true})";
  auto c = parse_model_config(old_style, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMistral);
  EXPECT_EQ(c->head_dim, 96);
  EXPECT_EQ(c->num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_DOUBLE_EQ(c->rope.theta, 1000000.0);
  EXPECT_EQ(c->rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c->rope.factor, 2.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  const RopeTables t = compute_rope(*c);
  ASSERT_EQ(t.inv_freq.size(), 48u);
  EXPECT_FLOAT_EQ(t.inv_freq[0], 0.5f);  // theta^0 / factor
}

TEST(ModelConfig, Qwen3EnablesQkNorm) {
  std::string q = kLlama;
  q.replace(q.find("LlamaForCausalLM"), 16, "Qwen3ForCausalLM");
  auto c = parse_model_config(q, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
}

void expect_error(const std::string& text, const std::string& needle) {
  auto c = parse_model_config(text, "my/config.json");
  ASSERT_FALSE(c.ok()) << "accepted: " << text;
  EXPECT_NE(std::string(c.status().message()).find(needle), std::string::npos) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("my/config.json"), std::string::npos) << c.status();
}

TEST(ModelConfig, RejectsBadFilesByName) {
  expect_error("{not json", "not valid JSON");
  expect_error("[1, 2]", "not a JSON object");
  std::string unknown = kLlama;
  unknown.replace(unknown.find("LlamaForCausalLM"), 16, "GPT2LMHeadModel");
  expect_error(unknown, "GPT2LMHeadModel");
  std::string bad_rope = kLlama;
  bad_rope.replace(bad_rope.find("\"default\""), 9, "\"dynamic\"");
  expect_error(bad_rope, "dynamic");
  std::string no_hidden = kLlama;
  no_hidden.replace(no_hidden.find("\"hidden_size\": 512,"), 19, "");
  expect_error(no_hidden, "hidden_size");
  std::string bad_kv = kLlama;
  bad_kv.replace(bad_kv.find("\"num_key_value_heads\": 4"), 24, "\"num_key_value_heads\": 3");
  expect_error(bad_kv, "num_key_value_heads");
  expect_error(with(kLlama, R"("hidden_act": "gelu")"), "hidden_act");
  std::string negative = kLlama;
  negative.replace(negative.find("\"vocab_size\": 4096"), 18, "\"vocab_size\": -1");
  expect_error(negative, "vocab_size");
  std::string llama3_missing = kLlama;
  llama3_missing.replace(llama3_missing.find("\"default\""), 9, "\"llama3\"");
  expect_error(llama3_missing, "factor");
}

// Found while writing fuzz/model_config_fuzzer: a head_dim near INT64_MAX overflowed rotary_dim() (float
// to int64 conversion out of range, undefined behaviour) instead of being refused.
TEST(ModelConfig, RejectsIntegersBeyondInt32) {
  expect_error(with(kLlama, R"("head_dim": 9223372036854775806)"), "head_dim must be <= 2147483647");
  std::string huge_vocab = kLlama;
  huge_vocab.replace(huge_vocab.find("\"vocab_size\": 4096"), 18, "\"vocab_size\": 2147483648");
  expect_error(huge_vocab, "vocab_size must be <= 2147483647");
  std::string max_vocab = kLlama;
  max_vocab.replace(max_vocab.find("\"vocab_size\": 4096"), 18, "\"vocab_size\": 2147483647");
  auto c = parse_model_config(max_vocab, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 2147483647);
}

// bos/eos ids must name tokens: negative, too large or beyond int32 (which used to wrap) are refused
// by field name; null means none.
TEST(ModelConfig, TokenIdsMustBeInTheVocabulary) {
  const auto replaced = [](const std::string& from, const std::string& to) {
    std::string text = kLlama;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  expect_error(replaced("\"bos_token_id\": 0", "\"bos_token_id\": -1"), "bos_token_id holds -1, not a token id");
  expect_error(replaced("\"bos_token_id\": 0", "\"bos_token_id\": \"<s>\""), "bos_token_id must be an integer");
  expect_error(replaced("[1, 2]", "[1, 4096]"), "eos_token_id holds 4096, not a token id in [0, vocab_size 4096)");
  expect_error(replaced("[1, 2]", "-3"), "eos_token_id holds -3");
  expect_error(replaced("[1, 2]", "4294967297"), "eos_token_id holds 4294967297");
  expect_error(replaced("[1, 2]", "18446744073709551615"), "eos_token_id holds 18446744073709551615");
  expect_error(replaced("[1, 2]", "[1, 2.5]"), "eos_token_id must be an integer or a list of integers");
  auto none = parse_model_config(
      replaced("\"bos_token_id\": 0, \"eos_token_id\": [1, 2]", "\"bos_token_id\": null, \"eos_token_id\": 4095"),
      "config.json");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->bos_token_id.has_value());
  EXPECT_EQ(none->eos_token_ids, (std::vector<int32_t>{4095}));
}

}  // namespace
}  // namespace exl3
