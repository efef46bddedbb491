// Mistral's sliding window through the whole model on the CPU backend (the fixture's weights under
// a MistralForCausalLM config.json with sliding_window W):
//   - W at least the sequence length: logits equal the Llama (window 0) model's;
//   - one layer, W = 16: a position p < W sees its whole prefix, so its logits equal window 0's;
//     a position p >= W sees exactly tokens p-W+1..p, so its logits equal the last row of a
//     full-causal forward over just those W tokens run at positions 0..W-1 (RoPE scores depend only
//     on position differences; 1e-4 covers the rounding of the shifted angles, 5e-6 today), and
//     differ from window 0's;
//   - four layers (the receptive field grows by W-1 per layer): positions < W equal window 0,
//     later ones differ, and a token-by-token decode through the windowed cache (pages of 16,
//     prefill chunks of 7) equals one whole-sequence prefill.
#include <cmath>
#include <cstdio>

#include "common/test_paths.h"
#include "model/heldout_tokens.h"
#include "gtest/gtest.h"
#include "model/variant_model_dir.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

constexpr int64_t kVocab = 4096;

// The held-out tokens these tests read start at 1000.
std::vector<int32_t> heldout_tokens(int64_t n) { return testing::heldout_tokens(1000, n); }

std::unique_ptr<LlamaModel> load(const std::string& name, const nlohmann::json& edits) {
  auto model = LlamaModel::load(testing::variant_model_dir(name, edits));
  EXL3_CHECK_OK(model.status());
  return *std::move(model);
}

// Largest |a - b| over row `ra` of a and row `rb` of b.
double row_diff(const Tensor& a, int64_t ra, const Tensor& b, int64_t rb) {
  double m = 0.0;
  for (int64_t i = 0; i < kVocab; ++i) {
    m = std::max(m,
                 static_cast<double>(std::fabs(a.data<float>()[ra * kVocab + i] - b.data<float>()[rb * kVocab + i])));
  }
  return m;
}

TEST(SlidingWindowModel, ConfigSetsEveryLayersWindow) {
  auto model = load("mistral-w16", {{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 16}});
  EXPECT_EQ(model->config().sliding_window, 16);
  KvCache cache(model->cache_shape(2, 16), model->backend());
  for (int64_t l = 0; l < model->config().num_layers; ++l) EXPECT_EQ(cache.layer(l).window, 16) << "layer " << l;
  auto plain = LlamaModel::load(testing::source_path("models/exl3-4.0bpw"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->cache_shape(2, 16).window, 0);
}

TEST(SlidingWindowModel, WindowCoveringTheSequenceEqualsFullCausal) {
  const std::vector<int32_t> ids = heldout_tokens(48);
  auto llama = LlamaModel::load(testing::source_path("models/exl3-4.0bpw"));
  ASSERT_TRUE(llama.ok()) << llama.status();
  auto mistral = load("mistral-w48", {{"architectures", {"MistralForCausalLM"}}, {"sliding_window", 48}});
  const Tensor a = forward_sequence(**llama, ids, {});
  const Tensor b = forward_sequence(*mistral, ids, {});
  double worst = 0.0;
  for (int64_t p = 0; p < 48; ++p) worst = std::max(worst, row_diff(a, p, b, p));
  std::printf("window 48 over 48 tokens vs window 0: max |logit diff| %.3g\n", worst);
  EXPECT_LE(worst, 1e-5);
}

TEST(SlidingWindowModel, OneLayerWindowEqualsForwardOverTheWindowAlone) {
  constexpr int64_t kW = 16, kN = 48;
  const std::vector<int32_t> ids = heldout_tokens(kN);
  auto full = load("llama-1layer", {{"num_hidden_layers", 1}});
  auto windowed = load("mistral-1layer-w16",
                       {{"architectures", {"MistralForCausalLM"}}, {"num_hidden_layers", 1}, {"sliding_window", kW}});
  const Tensor causal = forward_sequence(*full, ids, {});
  const Tensor ours = forward_sequence(*windowed, ids, {});
  double prefix_worst = 0.0, window_worst = 0.0, min_change = 1e30;
  for (int64_t p = 0; p < kN; ++p) {
    if (p < kW) {
      prefix_worst = std::max(prefix_worst, row_diff(ours, p, causal, p));
      continue;
    }
    // Only tokens p-W+1..p, at positions 0..W-1, through the full-causal model.
    const std::vector<int32_t> alone(ids.begin() + (p - kW + 1), ids.begin() + p + 1);
    const Tensor expected = forward_sequence(*full, alone, {});
    const double d = row_diff(ours, p, expected, kW - 1);
    window_worst = std::max(window_worst, d);
    if (d > 1e-4) ADD_FAILURE() << "position " << p << ": max |logit diff| " << d << " vs the window alone";
    min_change = std::min(min_change, row_diff(ours, p, causal, p));
  }
  std::printf(
      "1 layer, window %lld: positions < W vs window 0: %.3g; positions >= W vs the window alone: %.3g; "
      "smallest change vs window 0 at p >= W: %.3g\n",
      static_cast<long long>(kW), prefix_worst, window_worst, min_change);
  EXPECT_LE(prefix_worst, 1e-5);
  EXPECT_LE(window_worst, 1e-4);
  // The window really cuts: every later position's logits move by far more than the tolerance.
  EXPECT_GE(min_change, 1e-2);
}

TEST(SlidingWindowModel, FourLayersDecodeEqualsPrefill) {
  constexpr int64_t kW = 16, kN = 64;
  const std::vector<int32_t> ids = heldout_tokens(kN);
  auto llama = LlamaModel::load(testing::source_path("models/exl3-4.0bpw"));
  ASSERT_TRUE(llama.ok()) << llama.status();
  auto mistral = load("mistral-w16-4", {{"architectures", {"MistralForCausalLM"}}, {"sliding_window", kW}});
  const Tensor causal = forward_sequence(**llama, ids, {});
  const Tensor prefill = forward_sequence(*mistral, ids, {});
  // Prefill chunks of 7 tokens over pages of 16: every step reads keys from earlier steps' pages.
  const Tensor stepped = forward_sequence(*mistral, ids, {.chunk_size = 7, .page_size = 16});
  double before = 0.0, decode = 0.0, min_after = 1e30;
  for (int64_t p = 0; p < kN; ++p) {
    if (p < kW) before = std::max(before, row_diff(prefill, p, causal, p));
    if (p >= kW) min_after = std::min(min_after, row_diff(prefill, p, causal, p));
    decode = std::max(decode, row_diff(prefill, p, stepped, p));
  }
  std::printf(
      "4 layers, window %lld: p < W vs window 0 %.3g; smallest change at p >= W %.3g; chunks of 7 vs one "
      "prefill %.3g\n",
      static_cast<long long>(kW), before, min_after, decode);
  EXPECT_LE(before, 1e-5);
  EXPECT_GE(min_after, 1e-2);
  EXPECT_LE(decode, 1e-4);
}

}  // namespace
}  // namespace exl3
