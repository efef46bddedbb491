// Engine: StepSequence.banned_now (banned strings' per-position bans) applies to the step's first
// draw of a sequence only: greedy with the first token banned draws the next-best token there, and
// a ban of a token the second iteration draws changes nothing; a rewound sequence (start_pos below
// its history) continues from the kept tokens; bad lists are refused.
#include "worker/engine.h"

#include <algorithm>
#include <fstream>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

std::vector<int32_t> fixture_prompt() {
  std::ifstream in(testing::test_data("reference/token_ids.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  return j["input_ids"][0].get<std::vector<int32_t>>();
}

std::unique_ptr<Engine> make_engine() {
  auto model = LlamaModel::load(testing::source_path("models/exl3-4.0bpw"));
  EXL3_CHECK_OK(model.status());
  auto engine = Engine::create(*std::move(model), EngineOptions{16, 16}, nullptr);
  EXL3_CHECK_OK(engine.status());
  return *std::move(engine);
}

StepSequence greedy_seq(uint64_t id, std::vector<int32_t> tokens, int32_t start, int32_t prompt_len,
                        std::vector<int32_t> banned_now = {}) {
  StepSequence s;
  s.seq_id = id;
  s.tokens = std::move(tokens);
  s.start_pos = start;
  s.page_table = {2, 5, 7, 11};
  s.sample = true;
  s.sampling.temperature = 0.0f;
  s.prompt_len = prompt_len;
  s.banned_now = std::move(banned_now);
  return s;
}

// The two largest logits of the last row of the prompt run alone (the greedy token and the
// runner-up).
std::pair<int32_t, int32_t> top_two(const LlamaModel& model, const std::vector<int32_t>& ids) {
  const Tensor logits = forward_sequence(model, ids, {});
  const float* row = logits.data<float>() + (ids.size() - 1) * 4096;
  std::vector<int32_t> order(4096);
  for (int32_t i = 0; i < 4096; ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  return {order[0], order[1]};
}

TEST(EngineBannedNow, OnlyTheFirstDrawOfTheStep) {
  const std::vector<int32_t> prompt = fixture_prompt();
  const int32_t n = static_cast<int32_t>(prompt.size());
  auto engine = make_engine();
  auto plain = engine->run_step(StepInput{{greedy_seq(1, prompt, 0, n)}, 3});
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<int32_t> t = plain->tokens.at(0).second;
  ASSERT_EQ(t.size(), 3u);
  const auto [best, second] = top_two(engine->model(), prompt);
  ASSERT_EQ(t[0], best);

  // The first token banned: the runner-up is drawn there.
  auto banned = engine->run_step(StepInput{{greedy_seq(2, prompt, 0, n, {best})}, 3});
  ASSERT_TRUE(banned.ok()) << banned.status();
  EXPECT_EQ(banned->tokens.at(0).second.at(0), second);

  // A ban of the token the second iteration draws: not applied there (unless it is the first).
  if (t[1] != t[0]) {
    auto later = engine->run_step(StepInput{{greedy_seq(3, prompt, 0, n, {t[1]})}, 3});
    ASSERT_TRUE(later.ok()) << later.status();
    EXPECT_EQ(later->tokens.at(0).second, t) << "banned_now reached a later iteration";
  }

  // Rewind sequence 1 to its first output token and ban the second there: the history is
  // truncated to start_pos, position n + 1 draws anything but t[1].
  auto rewound = engine->run_step(StepInput{{greedy_seq(1, {t[0]}, n, 0, {t[1]})}, 1});
  ASSERT_TRUE(rewound.ok()) << rewound.status();
  std::vector<int32_t> ids = prompt;
  ids.push_back(t[0]);
  const auto [best1, second1] = top_two(engine->model(), ids);
  ASSERT_EQ(best1, t[1]);
  EXPECT_EQ(rewound->tokens.at(0).second, std::vector<int32_t>{second1});
}

TEST(EngineBannedNow, BadListsAreRefused) {
  const std::vector<int32_t> prompt = fixture_prompt();
  const int32_t n = static_cast<int32_t>(prompt.size());
  auto engine = make_engine();
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{5, 3}, std::vector<int32_t>{4, 4},
                                          std::vector<int32_t>{-1}, std::vector<int32_t>{4096}}) {
    auto out = engine->run_step(StepInput{{greedy_seq(9, prompt, 0, n, bad)}, 1});
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << bad.size();
  }
  StepSequence all = greedy_seq(9, prompt, 0, n);
  for (int32_t i = 0; i < 4095; ++i) all.sampling.banned_ids.push_back(i);
  all.banned_now = {4095};
  EXPECT_EQ(engine->run_step(StepInput{{all}, 1}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exl3
