// Engine: chunked prefill + multi-iteration decode through the paged cache equals a plain greedy
// loop by full recomputation; batched sequences equal the same sequences run alone; bad steps
// are refused.
#include "worker/engine.h"

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/model/sequence_forward.h"

#include <fstream>

namespace exl3 {
namespace {

std::vector<std::vector<int32_t>> fixture_prompts() {
  std::ifstream in(testing::test_data("reference/token_ids.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  return j["input_ids"].get<std::vector<std::vector<int32_t>>>();
}

std::unique_ptr<Engine> make_engine(int64_t pages, int64_t page_size) {
  auto model = LlamaModel::load(testing::source_path("models/exl3-4.0bpw"));
  EXL3_CHECK_OK(model.status());
  auto engine = Engine::create(*std::move(model), EngineOptions{pages, page_size}, nullptr);
  EXL3_CHECK_OK(engine.status());
  return *std::move(engine);
}

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

StepSequence seq(uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> pages, bool sample,
                 int32_t prompt_len) {
  StepSequence s;
  s.seq_id = id;
  s.tokens = std::move(tokens);
  s.start_pos = start;
  s.page_table = std::move(pages);
  s.sample = sample;
  s.sampling.temperature = 0.0f;
  s.prompt_len = prompt_len;
  return s;
}

TEST(Engine, ChunkedPrefillAndMultiStepDecodeMatchRecompute) {
  auto engine = make_engine(16, 16);
  const std::vector<int32_t> prompt = fixture_prompts()[0];
  const std::vector<int32_t> pages = {3, 9, 1, 12};  // 64 positions, deliberately scattered
  // Prefill in two chunks (20 + 12 tokens), then 3 commands of 4 decode iterations each.
  StepInput first{{seq(7, {prompt.begin(), prompt.begin() + 20}, 0, pages, false, 32)}, 1};
  ASSERT_TRUE(engine->run_step(first).ok());
  StepInput second{{seq(7, {prompt.begin() + 20, prompt.end()}, 20, pages, true, 32)}, 4};
  auto out = engine->run_step(second);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<int32_t> generated = out->tokens.at(0).second;
  for (int cmd = 0; cmd < 2; ++cmd) {
    const int32_t pos = 32 + static_cast<int32_t>(generated.size()) - 1;
    auto more = engine->run_step(StepInput{{seq(7, {generated.back()}, pos, pages, true, 0)}, 4});
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
    auto engine = make_engine(8, 32);
    auto out = engine->run_step(StepInput{{seq(1, prompts[i], 0, {2, 5}, true, 32)}, 6});
    ASSERT_TRUE(out.ok()) << out.status();
    alone.push_back(out->tokens[0].second);
  }
  auto engine = make_engine(8, 32);
  StepInput batch{{seq(10, prompts[0], 0, {0, 1}, true, 32), seq(11, prompts[1], 0, {2, 3}, true, 32),
                   seq(12, prompts[2], 0, {4, 5}, true, 32)},
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
  auto engine = make_engine(4, 16);
  auto expect_bad = [&](const StepInput& in, const std::string& needle) {
    auto out = engine->run_step(in);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(std::string(out.status().message()).find(needle), std::string::npos) << out.status();
  };
  expect_bad(StepInput{{seq(1, {5000}, 0, {0}, true, 1)}, 1}, "5000");
  expect_bad(StepInput{{seq(1, {5, 6}, 3, {0}, true, 2)}, 1}, "start position");
  expect_bad(StepInput{{seq(1, std::vector<int32_t>(20, 5), 0, {0}, true, 20)}, 1}, "pages cannot hold");
  expect_bad(StepInput{{seq(1, {5}, 0, {7}, true, 1)}, 1}, "page 7");
  expect_bad(StepInput{{seq(1, {}, 0, {0}, true, 1)}, 1}, "no tokens");
}

}  // namespace
}  // namespace exl3
