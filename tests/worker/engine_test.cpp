// Engine: chunked prefill + multi-iteration decode through the paged cache equals a plain greedy
// loop by full recomputation; batched sequences equal the same sequences run alone; bad steps
// are refused.
#include "worker/engine.h"

#include "gtest/gtest.h"
#include "worker/engine_testing.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

using testing::fixture_prompts;

std::vector<int32_t> greedy_by_recompute(const LlamaModel& model, std::vector<int32_t> ids, int steps) {
  std::vector<int32_t> out;
  for (int s = 0; s < steps; ++s) {
    const Tensor logits = forward_sequence(model, ids, {});
    const float* row = logits.data<float>() + (ids.size() - 1) * 4096;
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + 4096) - row);
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

TEST(Engine, ChunkedPrefillAndMultiStepDecodeMatchRecompute) {
  auto engine = testing::make_engine({16, 16});
  const std::vector<int32_t> prompt = fixture_prompts()[0];
  const std::vector<int32_t> pages = {3, 9, 1, 12};  // 64 positions, deliberately scattered
  // Prefill in two chunks (20 + 12 tokens), then 3 commands of 4 decode iterations each.
  StepInput first{{greedy_step_sequence(7, {prompt.begin(), prompt.begin() + 20}, 0, pages, false, 32)}, 1};
  ASSERT_TRUE(engine->run_step(first).ok());
  StepInput second{{greedy_step_sequence(7, {prompt.begin() + 20, prompt.end()}, 20, pages, true, 32)}, 4};
  auto out = engine->run_step(second);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<int32_t> generated = out->tokens.at(0).second;
  for (int cmd = 0; cmd < 2; ++cmd) {
    const int32_t pos = 32 + static_cast<int32_t>(generated.size()) - 1;
    auto more = engine->run_step(StepInput{{greedy_step_sequence(7, {generated.back()}, pos, pages, true, 0)}, 4});
    ASSERT_TRUE(more.ok()) << more.status();
    generated.insert(generated.end(), more->tokens[0].second.begin(), more->tokens[0].second.end());
  }
  ASSERT_EQ(generated.size(), 12u);
  EXPECT_EQ(generated, greedy_by_recompute(engine->model(), prompt, 12));
}

TEST(Engine, BatchedSequencesEqualSequencesAlone) {
  const auto prompts = fixture_prompts();
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 3; ++i) {
    auto engine = testing::make_engine({8, 32});
    auto out = engine->run_step(StepInput{{greedy_step_sequence(1, prompts[i], 0, {2, 5}, true, 32)}, 6});
    ASSERT_TRUE(out.ok()) << out.status();
    alone.push_back(out->tokens[0].second);
  }
  auto engine = testing::make_engine({8, 32});
  StepInput batch{{greedy_step_sequence(10, prompts[0], 0, {0, 1}, true, 32),
                   greedy_step_sequence(11, prompts[1], 0, {2, 3}, true, 32),
                   greedy_step_sequence(12, prompts[2], 0, {4, 5}, true, 32)},
                  6};
  auto out = engine->run_step(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->tokens.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out->tokens[i].first, 10u + i);
    EXPECT_EQ(out->tokens[i].second, alone[i]) << "sequence " << i;
  }
  engine->release({10, 11, 12});
  EXPECT_EQ(engine->live_sequences(), 0u);
}

TEST(Engine, RefusesInconsistentSteps) {
  auto engine = testing::make_engine({4, 16});
  auto expect_bad = [&](const StepInput& in, const std::string& needle) {
    auto out = engine->run_step(in);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(std::string(out.status().message()).find(needle), std::string::npos) << out.status();
  };
  expect_bad(StepInput{{greedy_step_sequence(1, {5000}, 0, {0}, true, 1)}, 1}, "5000");
  expect_bad(StepInput{{greedy_step_sequence(1, {5, 6}, 3, {0}, true, 2)}, 1}, "start position");
  expect_bad(StepInput{{greedy_step_sequence(1, std::vector<int32_t>(20, 5), 0, {0}, true, 20)}, 1},
             "pages cannot hold");
  expect_bad(StepInput{{greedy_step_sequence(1, {5}, 0, {7}, true, 1)}, 1}, "page 7");
  expect_bad(StepInput{{greedy_step_sequence(1, {}, 0, {0}, true, 1)}, 1}, "no tokens");
}

}  // namespace
}  // namespace exl3
