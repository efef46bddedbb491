// Held-out perplexity (256-token windows) against ExLlamaV3's and HF's published numbers
// (shared/fixtures/README.md): 115.673 (EXL3 4.0 bpw), 120.062 (EXL3 2.5 bpw), 115.946 (HF bf16).
#include "bench/perplexity.h"

#include "bench/token_ids_file.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

// `tolerance` is relative: 10x today's deviation, at least 1e-4 (P1's acceptance bound is 0.5%).
void expect_perplexity(const std::string& model_dir, double expected, double tolerance) {
  EXL3_REQUIRE_FILE(model_dir + "/config.json");
  auto ids = load_token_sequences(testing::test_data("reference/heldout_ids.safetensors"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 1u);
  ASSERT_EQ((*ids)[0].size(), 75850u);
  auto model = LlamaModel::load(model_dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto r = evaluate_perplexity(**model, (*ids)[0], 256);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s: perplexity %.4f (reference %.3f, %+.3f%%), %lld windows, %lld tokens\n", model_dir.c_str(),
              r->perplexity, expected, 100.0 * (r->perplexity / expected - 1.0), static_cast<long long>(r->windows),
              static_cast<long long>(r->scored_tokens));
  EXPECT_EQ(r->windows, 296);
  EXPECT_EQ(r->scored_tokens, 75480);
  EXPECT_NEAR(r->perplexity, expected, tolerance * expected);
}

TEST(Perplexity, Exl3FourBit) { expect_perplexity(testing::source_path("models/exl3-4.0bpw"), 115.673, 5e-4); }
TEST(Perplexity, Exl3TwoPointFiveBit) { expect_perplexity(testing::shared_path("fixtures/exl3-2.5bpw"), 120.062, 1e-4); }
TEST(Perplexity, HfBf16) { expect_perplexity(testing::shared_path("fixtures/hf-tiny-llama"), 115.946, 3.2e-3); }

TEST(Perplexity, RejectsBadWindows) {
  auto model = LlamaModel::load(testing::source_path("models/exl3-4.0bpw"));
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int32_t> ids(100, 5);
  EXPECT_FALSE(evaluate_perplexity(**model, ids, 1).ok());
  EXPECT_FALSE(evaluate_perplexity(**model, ids, 100).ok());    // not more tokens than one window
  EXPECT_FALSE(evaluate_perplexity(**model, ids, 4096).ok());   // beyond the context
  ids[7] = 4096;
  auto bad = evaluate_perplexity(**model, ids, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("4096"), std::string::npos);
}

}  // namespace
}  // namespace exl3
