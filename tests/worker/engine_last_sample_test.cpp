// Engine::take_last_samples (pipelined steps, StepSequence.from_last_sample): a sequence that
// continues from the token this rank sampled last gives exactly the tokens of the same steps with
// that token sent explicitly (seeded sampling, 3 decode iterations per step, two sequences); a
// start position that is not where the history ends, tokens sent along, a sequence that does not
// sample or one the rank does not know are refused with INVALID_ARGUMENT and change nothing; an
// unfilled from_last_sample sequence is refused by run_step.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine.h"
#include "worker/engine_testing.h"

namespace exl3 {
namespace {

using testing::fixture_prompts;
using testing::make_engine;

StepSequence seeded(uint64_t id, std::vector<int32_t> tokens, int32_t start, std::vector<int32_t> pages,
                    int32_t prompt_len) {
  StepSequence s = greedy_step_sequence(id, std::move(tokens), start, std::move(pages), true, prompt_len);
  s.sampling.temperature = 0.8f;
  s.sampling.top_k = 40;
  s.sampling.seed = 1234 + id;
  return s;
}

// Prefill of two prompts, then `rounds` steps of 3 decode iterations; `pipelined` sends the
// decode steps' tokens as from_last_sample. Returns every sampled token per sequence.
std::vector<std::vector<int32_t>> generate(bool pipelined, int rounds) {
  const std::vector<std::vector<int32_t>> prompts = fixture_prompts();
  EngineOptions options;
  options.num_pages = 16;
  options.page_size = 16;
  std::unique_ptr<Engine> engine = make_engine(options);
  const std::vector<std::vector<int32_t>> pages = {{0, 1, 2, 3, 4, 5}, {8, 9, 10, 11, 12, 13}};
  std::vector<std::vector<int32_t>> out(2);
  StepInput in;
  in.decode_steps = 3;
  for (int s = 0; s < 2; ++s) {
    const std::vector<int32_t> p(prompts[s].begin(), prompts[s].begin() + 20 + 7 * s);
    in.sequences.push_back(seeded(s + 1, p, 0, pages[s], static_cast<int32_t>(p.size())));
  }
  for (int round = 0; round <= rounds; ++round) {
    StepInput step = in;
    EXPECT_TRUE(engine->take_last_samples(step).ok());
    absl::StatusOr<StepOutput> result = engine->run_step(step);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return out;
    for (int s = 0; s < 2; ++s) {
      const std::vector<int32_t>& sampled = result->tokens[s].second;
      EXPECT_EQ(sampled.size(), 3u);
      out[s].insert(out[s].end(), sampled.begin(), sampled.end());
      StepSequence& next = in.sequences[s];
      next.start_pos += (next.from_last_sample ? 1 : static_cast<int32_t>(next.tokens.size())) + 2;
      if (pipelined) {
        next.tokens.clear();
        next.from_last_sample = true;
      } else {
        next.tokens = {sampled.back()};
      }
    }
  }
  return out;
}

TEST(EngineLastSample, SameTokensAsExplicitSteps) {
  const std::vector<std::vector<int32_t>> explicit_steps = generate(false, 4);
  const std::vector<std::vector<int32_t>> pipelined = generate(true, 4);
  ASSERT_EQ(explicit_steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    ASSERT_EQ(explicit_steps[s].size(), 15u);
    EXPECT_EQ(pipelined[s], explicit_steps[s]) << "sequence " << s + 1;
  }
}

TEST(EngineLastSample, MismatchesAreRefused) {
  const std::vector<int32_t> first_prompt = fixture_prompts()[0];
  const std::vector<int32_t> prompt(first_prompt.begin(), first_prompt.begin() + 12);
  EngineOptions options;
  options.num_pages = 8;
  options.page_size = 16;
  std::unique_ptr<Engine> engine = make_engine(options);
  StepInput in;
  in.sequences.push_back(greedy_step_sequence(1, prompt, 0, {0, 1}, true, 12));
  const absl::StatusOr<StepOutput> first = engine->run_step(in);
  ASSERT_TRUE(first.ok()) << first.status();  // history: 12 prompt tokens + 1 sample

  auto continued = [](int32_t start, uint64_t id = 1) {
    StepInput next;
    StepSequence s = greedy_step_sequence(id, {}, start, {0, 1}, true, 12);
    s.from_last_sample = true;
    next.sequences.push_back(s);
    return next;
  };
  for (const int32_t start : {11, 13, -1}) {
    StepInput bad = continued(start);
    const absl::Status status = engine->take_last_samples(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "start " << start << ": " << status;
    EXPECT_TRUE(bad.sequences[0].tokens.empty());
  }
  StepInput unknown = continued(0, 7);
  EXPECT_EQ(engine->take_last_samples(unknown).code(), absl::StatusCode::kInvalidArgument);
  StepInput with_tokens = continued(12);
  with_tokens.sequences[0].tokens = {5};
  EXPECT_EQ(engine->take_last_samples(with_tokens).code(), absl::StatusCode::kInvalidArgument);
  StepInput no_sample = continued(12);
  no_sample.sequences[0].sample = false;
  EXPECT_EQ(engine->take_last_samples(no_sample).code(), absl::StatusCode::kInvalidArgument);

  StepInput unfilled = continued(12);
  const absl::StatusOr<StepOutput> refused = engine->run_step(unfilled);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();

  StepInput good = continued(12);
  ASSERT_TRUE(engine->take_last_samples(good).ok());
  ASSERT_EQ(good.sequences[0].tokens.size(), 1u);
  EXPECT_TRUE(engine->run_step(good).ok());
}

}  // namespace
}  // namespace exl3
