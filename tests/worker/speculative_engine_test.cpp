// Speculative decoding in the Engine (worker/engine_speculative.cpp), with ExLlamaV3's 2.5 bpw
// fixture drafting for the 4.0 bpw one on the CPU backend: greedy output equals plain decoding
// token for token, the first token of a sampled round follows the target's own distribution
// (chi-square), and the acceptance rate and forwards saved are reported.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "common/chi_square.h"
#include "gtest/gtest.h"
#include "worker/draft_model.h"
#include "worker/engine.h"
#include "worker/engine_testing.h"
#include "worker/model/config.h"
#include "worker/model/model_shard.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

using testing::fixture_prompts;

std::string draft_dir() { return testing::shared_path("fixtures/exl3-2.5bpw"); }

// The 2.5 bpw draft on `backend` for an engine of `options`, its cache at `cache_bits`.
std::unique_ptr<DraftModel> load_draft(const EngineOptions& options, std::shared_ptr<Backend> backend, int64_t vocab,
                                       const KvCacheBits& cache_bits) {
  StepLimits limits;
  limits.max_step_tokens = options.max_step_tokens;
  limits.max_seqs = options.max_seqs;
  limits.max_pages_per_seq = options.num_pages;
  limits.max_logit_rows = options.max_logit_rows;
  auto d = DraftModel::load(draft_dir(), std::move(backend), options.num_pages, options.page_size, limits, vocab,
                            cache_bits);
  EXL3_CHECK_OK(d.status());
  return *std::move(d);
}

// An engine on its own CPU backend, drafting with the 2.5 bpw model (its cache at `draft_bits`)
// when `draft` is set.
std::unique_ptr<Engine> make_engine(EngineOptions options, bool draft, const KvCacheBits& draft_bits = {}) {
  std::shared_ptr<Backend> backend(make_cpu_backend());
  auto config = load_model_config(testing::fixture_model_dir());
  EXL3_CHECK_OK(config.status());
  auto model = LlamaModel::load_shard(testing::fixture_model_dir(), ModelShard::full(*config), backend);
  EXL3_CHECK_OK(model.status());
  std::unique_ptr<DraftModel> drafter;
  if (draft) {
    drafter = load_draft(options, backend, config->vocab_size, draft_bits);
    options.draft_rank = 0;
  }
  return testing::make_engine(options, *std::move(model), std::move(drafter));
}

struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // per token, when the sampling parameters ask
  int rounds = 0;  // decode commands after the prefill
};

// Greedy (temperature 0 in `sampling`, its other parameters as given): prefill `prompt` (sampling
// its first token), then decode commands of `decode_steps` (speculative rounds when `speculative`)
// until `length` tokens exist.
Decoded greedy(Engine& engine, const std::vector<int32_t>& prompt, int length, int32_t decode_steps, bool speculative,
               SamplingParams sampling = {}) {
  const std::vector<int32_t> pages = {5, 2, 11, 7, 0, 9, 3, 14};  // 128 positions
  const int32_t len = static_cast<int32_t>(prompt.size());
  sampling.temperature = 0.0f;
  const auto sequence = [&](std::vector<int32_t> tokens, int32_t start) {
    StepSequence s = greedy_step_sequence(1, std::move(tokens), start, pages, true, len);
    s.sampling = sampling;
    return s;
  };
  Decoded d;
  auto first = engine.run_step(StepInput{{sequence(prompt, 0)}, 1});
  EXL3_CHECK_OK(first.status());
  d.tokens = first->tokens[0].second;
  if (!first->logprobs.empty()) d.logprobs = first->logprobs[0];
  while (static_cast<int>(d.tokens.size()) < length) {
    StepInput step{{sequence({d.tokens.back()}, len + static_cast<int32_t>(d.tokens.size()) - 1)}, decode_steps};
    step.speculative = speculative;
    auto out = engine.run_step(step);
    EXL3_CHECK_OK(out.status());
    const std::vector<int32_t>& got = out->tokens[0].second;
    EXPECT_GE(got.size(), 1u);
    EXPECT_LE(got.size(), static_cast<size_t>(decode_steps));
    d.tokens.insert(d.tokens.end(), got.begin(), got.end());
    if (!out->logprobs.empty()) d.logprobs.insert(d.logprobs.end(), out->logprobs[0].begin(), out->logprobs[0].end());
    ++d.rounds;
  }
  d.tokens.resize(length);
  if (sampling.logprobs > 0) d.logprobs.resize(length);
  engine.release({1});
  return d;
}

TEST(SpeculativeEngine, GreedyOutputEqualsPlainDecoding) {
  EXL3_REQUIRE_FILE(draft_dir() + "/model.safetensors");
  constexpr int kLength = 48;
  constexpr int32_t kDraftTokens = 4;
  auto plain = make_engine(EngineOptions{16, 16}, false);
  auto drafted = make_engine(EngineOptions{16, 16}, true);
  int rounds = 0, tokens = 0;
  for (const std::vector<int32_t>& prompt : fixture_prompts()) {
    const Decoded want = greedy(*plain, prompt, kLength, 1, false);
    const Decoded got = greedy(*drafted, prompt, kLength, kDraftTokens + 1, true);
    EXPECT_EQ(got.tokens, want.tokens);
    rounds += got.rounds;
    tokens += kLength - 1;
  }
  // Each round proposes kDraftTokens and emits accepted + 1 tokens.
  const double accepted_per_round = static_cast<double>(tokens - rounds) / rounds;
  std::printf("2.5 bpw drafting for 4.0 bpw, greedy, %d draft tokens: %d tokens in %d target forwards (%.2f tokens "
              "per forward, %.1f%% of proposals accepted, %.0f%% fewer forwards than plain decoding)\n",
              kDraftTokens, tokens, rounds, static_cast<double>(tokens) / rounds,
              100.0 * accepted_per_round / kDraftTokens, 100.0 * (1.0 - static_cast<double>(rounds) / tokens));
  EXPECT_LT(rounds, tokens);  // the draft's proposals were accepted at least sometimes
}

// Greedy verification with a presence penalty (each row sees the proposals before it) and
// logprobs: the same tokens and logprobs as plain decoding with those parameters.
TEST(SpeculativeEngine, GreedyWithPenaltyAndLogprobsEqualsPlainDecoding) {
  EXL3_REQUIRE_FILE(draft_dir() + "/model.safetensors");
  constexpr int kLength = 40;
  constexpr int32_t kDraftTokens = 4;
  SamplingParams sampling;
  sampling.presence_penalty = 3.0f;
  sampling.logprobs = 2;
  auto plain = make_engine(EngineOptions{16, 16}, false);
  auto drafted = make_engine(EngineOptions{16, 16}, true);
  // Unpenalised, this prompt's greedy continuation repeats one token (38 38 38): rows that did not
  // see the proposals before them would repeat it too.
  const std::vector<int32_t> prompt = fixture_prompts()[1];
  const Decoded want = greedy(*plain, prompt, kLength, 1, false, sampling);
  const Decoded got = greedy(*drafted, prompt, kLength, kDraftTokens + 1, true, sampling);
  EXPECT_EQ(got.tokens, want.tokens);
  const Decoded unpenalised = greedy(*plain, prompt, kLength, 1, false);
  EXPECT_NE(unpenalised.tokens, want.tokens) << "the penalty should change this greedy output";
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t t = 0; t < got.logprobs.size(); ++t) {
    EXPECT_NEAR(got.logprobs[t].logprob, want.logprobs[t].logprob, 1e-5) << "token " << t;
    ASSERT_EQ(got.logprobs[t].top.size(), 2u) << "token " << t;
    for (size_t j = 0; j < 2; ++j) EXPECT_EQ(got.logprobs[t].top[j].id, want.logprobs[t].top[j].id) << "token " << t;
  }
  EXPECT_LT(got.rounds, kLength - 1) << "proposals were accepted at least sometimes";
}

// The draft's cache at --cache-bits 4,4 (18 bytes a 32-element group instead of 128 in F32) only
// changes its proposals, never the output: greedy decoding is still plain decoding.
TEST(SpeculativeEngine, AQuantizedDraftCacheKeepsTheGreedyOutput) {
  EXL3_REQUIRE_FILE(draft_dir() + "/model.safetensors");
  const EngineOptions options{16, 16};
  std::shared_ptr<Backend> backend(make_cpu_backend());
  auto config = load_model_config(draft_dir());
  ASSERT_TRUE(config.ok()) << config.status();
  const uint64_t full = load_draft(options, backend, config->vocab_size, {})->cache_bytes();
  const uint64_t quantized = load_draft(options, backend, config->vocab_size, {4, 4})->cache_bytes();
  EXPECT_EQ(quantized * 128, full * 18);

  constexpr int kLength = 32;
  auto plain = make_engine(options, false);
  auto drafted = make_engine(options, true, {4, 4});
  const std::vector<int32_t> prompt = fixture_prompts()[2];
  const Decoded want = greedy(*plain, prompt, kLength, 1, false);
  const Decoded got = greedy(*drafted, prompt, kLength, 5, true);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_LT(got.rounds, kLength - 1) << "proposals were accepted at least sometimes";
}

TEST(SpeculativeEngine, DraftingWithTheTargetItselfAcceptsEverything) {
  // The target drafting for itself proposes exactly what greedy verification keeps.
  std::shared_ptr<Backend> backend(make_cpu_backend());
  auto config = load_model_config(testing::fixture_model_dir());
  ASSERT_TRUE(config.ok());
  EngineOptions options{16, 16};
  options.draft_rank = 0;
  auto model = LlamaModel::load_shard(testing::fixture_model_dir(), ModelShard::full(*config), backend);
  ASSERT_TRUE(model.ok());
  auto self = DraftModel::load(testing::fixture_model_dir(), backend, 16, 16, StepLimits{}, config->vocab_size);
  ASSERT_TRUE(self.ok()) << self.status();
  auto engine = Engine::create(*std::move(model), options, nullptr, *std::move(self));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<int32_t> prompt = fixture_prompts()[1];
  const Decoded got = greedy(**engine, prompt, 33, 5, true);
  EXPECT_EQ(got.rounds, 32 / 5 + (32 % 5 != 0 ? 1 : 0));
}

TEST(SpeculativeEngine, RefusesAMismatchedDraftAndSpeculativeStepsWithoutOne) {
  std::shared_ptr<Backend> backend(make_cpu_backend());
  auto wrong_vocab = DraftModel::load(testing::fixture_model_dir(), backend, 4, 16, StepLimits{}, 32000);
  ASSERT_FALSE(wrong_vocab.ok());
  EXPECT_NE(std::string(wrong_vocab.status().message()).find("vocabulary"), std::string::npos)
      << wrong_vocab.status();
  auto plain = make_engine(EngineOptions{16, 16}, false);
  StepInput step{{greedy_step_sequence(1, {1, 2, 3}, 0, {0}, true, 3)}, 3};
  step.speculative = true;
  const auto out = plain->run_step(step);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(std::string(out.status().message()).find("no draft model"), std::string::npos) << out.status();
}

using testing::chi_square;
using testing::kChiSquare001;

TEST(SpeculativeEngine, SampledTokensFollowTheTargetDistribution) {
  EXL3_REQUIRE_FILE(draft_dir() + "/model.safetensors");
  constexpr int64_t kSeqs = 256;
  constexpr int kBatches = 6;
  constexpr int32_t kDraftTokens = 3;
  EngineOptions options{kSeqs, 16};
  options.max_logit_rows = kSeqs * (kDraftTokens + 1);
  auto engine = make_engine(options, true);
  const std::vector<int32_t> full = fixture_prompts()[2];
  const std::vector<int32_t> prompt(full.begin(), full.begin() + 4);
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 12;

  // The target's own distribution of the token after the prompt.
  auto reference = LlamaModel::load(testing::fixture_model_dir());
  ASSERT_TRUE(reference.ok());
  const Tensor logits = forward_sequence(**reference, prompt, {});
  const int64_t vocab = logits.dim(1);
  const std::span<const float> last(logits.data<float>() + (prompt.size() - 1) * vocab, static_cast<size_t>(vocab));
  const SampleDistribution p = sampling_distribution(last, params, prompt, {}, static_cast<int64_t>(prompt.size()));

  std::map<int32_t, int64_t> counts;
  int64_t draws = 0, extra_tokens = 0;
  uint64_t seed = 1;
  for (int b = 0; b < kBatches; ++b) {
    StepInput prefill, round;
    round.decode_steps = kDraftTokens + 1;
    round.speculative = true;
    for (int64_t s = 0; s < kSeqs; ++s) {
      StepSequence head = greedy_step_sequence(static_cast<uint64_t>(s + 1), {prompt.begin(), prompt.end() - 1}, 0,
                                               {static_cast<int32_t>(s)}, false, static_cast<int32_t>(prompt.size()));
      StepSequence tail =
          greedy_step_sequence(static_cast<uint64_t>(s + 1), {prompt.back()}, static_cast<int32_t>(prompt.size()) - 1,
                               {static_cast<int32_t>(s)}, true, static_cast<int32_t>(prompt.size()));
      tail.sampling = params;
      tail.sampling.seed = seed++;
      prefill.sequences.push_back(std::move(head));
      round.sequences.push_back(std::move(tail));
    }
    ASSERT_TRUE(engine->run_step(prefill).ok());
    auto out = engine->run_step(round);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<uint64_t> ids;
    for (const auto& [id, tokens] : out->tokens) {
      ASSERT_FALSE(tokens.empty());
      ++counts[tokens[0]];
      ++draws;
      extra_tokens += static_cast<int64_t>(tokens.size()) - 1;
      ids.push_back(id);
    }
    engine->release(ids);
  }
  // Bins: each token with an expected count of at least 20, the rest together.
  std::vector<int64_t> observed;
  std::vector<double> expected;
  int64_t rest_count = draws;
  double rest_prob = 1.0;
  for (int32_t id = 0; id < vocab; ++id) {
    if (p.probs[id] * static_cast<double>(draws) < 20.0) continue;
    observed.push_back(counts[id]);
    expected.push_back(p.probs[id]);
    rest_count -= counts[id];
    rest_prob -= p.probs[id];
  }
  if (rest_prob * static_cast<double>(draws) >= 5.0) {
    observed.push_back(rest_count);
    expected.push_back(rest_prob);
  }
  ASSERT_GE(observed.size(), 3u);
  ASSERT_LE(observed.size(), std::size(kChiSquare001) + 1);
  const double* critical = kChiSquare001;
  const double stat = chi_square(observed, expected, draws);
  std::printf("%lld sampled rounds: first token chi-square %.2f over %zu bins (critical %.2f); %.2f proposals kept "
              "per round\n",
              static_cast<long long>(draws), stat, observed.size(), critical[observed.size() - 2],
              static_cast<double>(extra_tokens) / static_cast<double>(draws));
  EXPECT_LT(stat, critical[observed.size() - 2]);
  EXPECT_GT(extra_tokens, 0);
}

}  // namespace
}  // namespace exl3
