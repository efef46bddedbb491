// Engine side of prefix reuse: a sequence that starts at position 20 on a shared page (positions
// 0..15) and a copied page (Step.page_copies: positions 16..19 of another sequence's page) with
// its reused ids as history_prefix must produce exactly the logits and the sampled tokens of the
// same sequence computed from position 0 with the same chunking, at full precision and with a
// quantized cache (the copy moves the bit-plane words and scales); repetition penalty on, so the
// history must be complete. Malformed copies and history prefixes are refused.
#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"
#include "worker/engine.h"
#include "worker/engine_testing.h"

namespace exl3 {
namespace {

std::vector<int32_t> fixture_prompt() { return testing::fixture_prompts()[0]; }

std::unique_ptr<Engine> make_engine(KvCacheBits bits) {
  EngineOptions options;
  options.num_pages = 12;
  options.page_size = 16;
  options.cache_bits = bits;
  return testing::make_engine(options);
}

// A greedy sequence with a repetition penalty (so the history must be complete) returning its
// logits when it samples.
StepSequence seq(uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> pages, bool sample,
                 int32_t prompt_len) {
  StepSequence s = greedy_step_sequence(id, std::move(tokens), start, std::move(pages), sample, prompt_len);
  s.sampling.repetition_penalty = 1.3f;
  s.return_logits = sample;
  return s;
}

struct Run {
  std::vector<int32_t> tokens;
  Tensor logits;
};

Run output_of(const absl::StatusOr<StepOutput>& out) {
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  return Run{out->tokens.at(0).second, out->logits.at(0).second};
}

void reuse_equals_recompute(KvCacheBits bits) {
  const std::vector<int32_t> p = fixture_prompt();
  ASSERT_GE(p.size(), 24u);
  const std::vector<int32_t> shared(p.begin(), p.begin() + 20);
  const std::vector<int32_t> own = {p[23], p[5], p[7], 42, 17};  // B's own continuation
  const int32_t b_prompt = 25;

  // Reference: B alone, chunks [0, 20) then its own 5 tokens with 4 decode iterations.
  auto fresh = make_engine(bits);
  ASSERT_TRUE(fresh->run_step({{seq(2, shared, 0, {4, 6}, false, b_prompt)}, 1}).ok());
  const Run expected = output_of(fresh->run_step({{seq(2, own, 20, {4, 6}, true, b_prompt)}, 4}));

  // A computes [0, 20) into pages 3, 9 in the same chunk, then 4 more tokens of its own.
  auto engine = make_engine(bits);
  ASSERT_TRUE(engine->run_step({{seq(1, shared, 0, {3, 9}, false, 24)}, 1}).ok());
  const Run a_step = output_of(engine->run_step({{seq(1, {p.begin() + 20, p.begin() + 24}, 20, {3, 9}, true, 24)}, 1}));
  ASSERT_EQ(a_step.tokens.size(), 1u);
  // B shares page 3 and gets page 5, a copy of A's page 9 whose first 4 positions it reuses.
  StepInput in{{seq(2, own, 20, {3, 5}, true, b_prompt)}, 4};
  in.sequences[0].history_prefix = shared;
  in.page_copies = {{9, 5}};
  const Run got = output_of(engine->run_step(in));

  EXPECT_EQ(got.tokens, expected.tokens);
  ASSERT_TRUE(got.logits.defined() && expected.logits.defined());
  ASSERT_EQ(got.logits.numel(), expected.logits.numel());
  double max_diff = 0.0;
  int64_t first_diff = -1;
  for (int64_t i = 0; i < got.logits.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(got.logits.data<float>()[i]) - expected.logits.data<float>()[i]);
    if (d > 0 && first_diff < 0) first_diff = i;
    max_diff = std::max(max_diff, d);
  }
  // The same computation over the same KV bytes: identical.
  EXPECT_EQ(max_diff, 0.0) << "cache bits " << kv_cache_bits_name(bits) << ": first difference at logit " << first_diff;
  // A's pages are untouched by B's step: A decodes on exactly as when alone.
  auto a_alone = make_engine(bits);
  ASSERT_TRUE(a_alone->run_step({{seq(1, shared, 0, {3, 9}, false, 24)}, 1}).ok());
  output_of(a_alone->run_step({{seq(1, {p.begin() + 20, p.begin() + 24}, 20, {3, 9}, true, 24)}, 1}));
  const Run a_expected = output_of(a_alone->run_step({{seq(1, a_step.tokens, 24, {3, 9}, true, 24)}, 3}));
  const Run a_got = output_of(engine->run_step({{seq(1, a_step.tokens, 24, {3, 9}, true, 24)}, 3}));
  EXPECT_EQ(a_got.tokens, a_expected.tokens);
  ASSERT_EQ(a_got.logits.numel(), a_expected.logits.numel());
  EXPECT_TRUE(std::equal(a_got.logits.data<float>(), a_got.logits.data<float>() + a_got.logits.numel(),
                         a_expected.logits.data<float>()));
}

TEST(EnginePrefixReuse, SharedAndCopiedPagesEqualRecomputeFullPrecision) { reuse_equals_recompute({16, 16}); }

TEST(EnginePrefixReuse, SharedAndCopiedPagesEqualRecomputeQuantized) { reuse_equals_recompute({4, 3}); }

TEST(EnginePrefixReuse, RefusesMalformedCopiesAndHistories) {
  auto engine = make_engine({16, 16});
  const std::vector<int32_t> p = fixture_prompt();
  StepInput no_history{{seq(3, {p[0]}, 4, {1}, true, 5)}, 1};
  EXPECT_EQ(engine->run_step(no_history).status().code(), absl::StatusCode::kInvalidArgument);
  StepInput short_history{{seq(3, {p[0]}, 4, {1}, true, 5)}, 1};
  short_history.sequences[0].history_prefix = {p[1], p[2]};
  EXPECT_EQ(engine->run_step(short_history).status().code(), absl::StatusCode::kInvalidArgument);
  StepInput bad_token{{seq(3, {p[0]}, 2, {1}, true, 3)}, 1};
  bad_token.sequences[0].history_prefix = {p[1], 4096};
  EXPECT_EQ(engine->run_step(bad_token).status().code(), absl::StatusCode::kInvalidArgument);
  for (const auto& copy : {std::pair{2, 2}, std::pair{-1, 3}, std::pair{1, 12}}) {
    StepInput bad_copy{{seq(3, {p[0]}, 0, {1}, true, 1)}, 1};
    bad_copy.page_copies = {copy};
    EXPECT_EQ(engine->run_step(bad_copy).status().code(), absl::StatusCode::kInvalidArgument)
        << copy.first << " -> " << copy.second;
  }
  EXPECT_EQ(engine->live_sequences(), 0u);
}

}  // namespace
}  // namespace exl3
