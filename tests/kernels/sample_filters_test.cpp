// Tests of the later sampler filters of the reference (kernels/sampling.h): logit bias and bans,
// DRY (hand-computed matches, breakers, range, and a brute-force check of the linear-time
// dry_penalties), typical-p, XTC, temperature last, the raw-logit logprobs and the validation of
// the new fields; chi-square tests of the CPU backend's draws for typical-p and XTC.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/chi_square.h"
#include "common/sample_distribution_expect.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/philox.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

using testing::log_probs;

// Logits whose softmax is {0.4, 0.3, 0.2, 0.1} (to fp32 rounding of the logs).
const std::vector<float> kFour = log_probs({0.4, 0.3, 0.2, 0.1});

using testing::expect_distribution;

// ---- Logit bias and bans -------------------------------------------------------------------------

TEST(SamplingFilters, LogitBiasIsAddedFirst) {
  SamplingParams p;
  p.logit_bias = {{3, static_cast<float>(std::log(4.0))}};  // 0.1 -> 0.4 before normalising
  expect_distribution(kFour, p, {0.4 / 1.3, 0.3 / 1.3, 0.2 / 1.3, 0.4 / 1.3}, "bias +log 4 on token 3");
  // The bias comes before the repetition penalty: token 0's logit log(0.4) + log(2) = log(0.8)
  // < 0 is then multiplied by 2: weight 0.64.
  p.logit_bias = {{0, static_cast<float>(std::log(2.0))}};
  p.repetition_penalty = 2.0f;
  const double w0 = 0.8 * 0.8;
  const double s = w0 + 0.3 + 0.2 + 0.1;
  expect_distribution(kFour, p, {0}, {}, {w0 / s, 0.3 / s, 0.2 / s, 0.1 / s}, "bias then repetition");
}

TEST(SamplingFilters, BannedTokensAreNeverAdmissible) {
  SamplingParams p;
  p.banned_ids = {0, 2};
  expect_distribution(kFour, p, {0.0, 0.75, 0.0, 0.25}, "ban 0 and 2");
  p.temperature = 0.0f;
  expect_distribution(kFour, p, {0.0, 1.0, 0.0, 0.0}, "greedy skips the banned argmax");
  EXPECT_EQ(sample_ref(kFour, p, {}, {}, 0), 1);
  p.temperature = 1.0f;
  p.logit_bias = {{0, 50.0f}};  // a bias cannot lift a ban
  for (int64_t pos = 0; pos < 2000; ++pos) {
    const int32_t t = sample_ref(kFour, p, {}, {}, pos);
    ASSERT_TRUE(t == 1 || t == 3) << "banned token " << t << " drawn at " << pos;
  }
}

// ---- DRY -----------------------------------------------------------------------------------------

// The definition of the contract, as directly as possible: O(L^2) over every occurrence.
std::vector<DryPenalty> dry_brute_force(const SamplingParams& p, const std::vector<int32_t>& history) {
  std::vector<int32_t> h = history;
  if (p.dry_range > 0 && static_cast<int64_t>(h.size()) > p.dry_range) h.erase(h.begin(), h.end() - p.dry_range);
  const int64_t L = static_cast<int64_t>(h.size());
  const auto breaker = [&](int32_t t) { return std::binary_search(p.dry_breakers.begin(), p.dry_breakers.end(), t); };
  std::vector<std::pair<int32_t, int64_t>> best;
  for (int64_t j = 0; j < L; ++j) {
    int64_t n = 0;
    while (n < j && h[j - 1 - n] == h[L - 1 - n] && !breaker(h[L - 1 - n])) ++n;
    bool found = false;
    for (auto& [c, m] : best) {
      if (c == h[j]) {
        m = std::max(m, n);
        found = true;
      }
    }
    if (!found) best.push_back({h[j], n});
  }
  std::sort(best.begin(), best.end());
  std::vector<DryPenalty> out;
  for (const auto& [c, n] : best) {
    if (n < p.dry_allowed_length) continue;
    const double penalty = std::min(
        static_cast<double>(p.dry_multiplier) * std::pow(static_cast<double>(p.dry_base), n - p.dry_allowed_length),
        kMaxDryPenalty);
    out.push_back({c, static_cast<float>(penalty)});
  }
  return out;
}

SamplingParams dry_params(float multiplier, float base, int32_t allowed) {
  SamplingParams p;
  p.dry_multiplier = multiplier;
  p.dry_base = base;
  p.dry_allowed_length = allowed;
  return p;
}

void expect_penalties(const std::vector<DryPenalty>& got, const std::vector<DryPenalty>& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id) << "entry " << i;
    EXPECT_EQ(got[i].penalty, want[i].penalty) << "entry " << i;
  }
}

TEST(SamplingFilters, DryHandComputedMatch) {
  // History 1 2 3 4 1 2 3: token 4 would extend "1 2 3" (n = 3); no other token continues a
  // repeat of the tail. Penalty 1 · 2^(3 - 2) = 2.
  const std::vector<int32_t> prompt = {1, 2, 3, 4}, output = {1, 2, 3};
  SamplingParams p = dry_params(1.0f, 2.0f, 2);
  expect_penalties(dry_penalties(p, prompt, output), {{4, 2.0f}}, "n = 3");
  p.dry_multiplier = 0.5f;
  p.dry_allowed_length = 3;
  expect_penalties(dry_penalties(p, prompt, output), {{4, 0.5f}}, "allowed 3: 0.5 · 2^0");
  p.dry_allowed_length = 4;
  expect_penalties(dry_penalties(p, prompt, output), {}, "allowed 4 > n");
  p.dry_multiplier = 0.0f;
  p.dry_allowed_length = 1;
  expect_penalties(dry_penalties(p, prompt, output), {}, "multiplier 0 = off");

  // The penalty enters the distribution after the penalties: zero logits over 8 tokens, token 4
  // down by 2.
  p = dry_params(1.0f, 2.0f, 2);
  const std::vector<float> flat(8, 0.0f);
  const double s = 7.0 + std::exp(-2.0);
  std::vector<double> want(8, 1.0 / s);
  want[4] = std::exp(-2.0) / s;
  expect_distribution(flat, p, prompt, output, want, "DRY in the distribution");
  // Greedy: among equal logits token 0 wins anyway; make token 4 the argmax by 1 and DRY flips it.
  std::vector<float> tilted(8, 0.0f);
  tilted[4] = 1.0f;
  p.temperature = 0.0f;
  EXPECT_EQ(sample_ref(tilted, p, prompt, output, 0), 0);
  p.dry_multiplier = 0.0f;
  EXPECT_EQ(sample_ref(tilted, p, prompt, output, 0), 4);
}

TEST(SamplingFilters, DryBreakersCutTheMatch) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4}, output = {1, 2, 3};
  SamplingParams p = dry_params(1.0f, 2.0f, 2);
  p.dry_breakers = {2};  // the tail free of breakers is "3": too short
  expect_penalties(dry_penalties(p, prompt, output), {}, "breaker 2");
  p.dry_breakers = {1};  // free tail "2 3": n = 2, penalty 2^0
  expect_penalties(dry_penalties(p, prompt, output), {{4, 1.0f}}, "breaker 1");
  p.dry_breakers = {4};  // 4 is the candidate, not inside the span: still n = 3
  expect_penalties(dry_penalties(p, prompt, output), {{4, 2.0f}}, "breaker 4 (the candidate)");
}

TEST(SamplingFilters, DryRangeLimitsTheHistory) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4}, output = {1, 2, 3};
  SamplingParams p = dry_params(1.0f, 2.0f, 2);
  p.dry_range = 4;  // 4 1 2 3: token 4 has nothing before it
  expect_penalties(dry_penalties(p, prompt, output), {}, "range 4");
  p.dry_range = 6;  // 2 3 4 1 2 3: n = 2
  expect_penalties(dry_penalties(p, prompt, output), {{4, 1.0f}}, "range 6");
  p.dry_range = 5;  // 3 4 1 2 3: n = 1
  expect_penalties(dry_penalties(p, prompt, output), {}, "range 5, allowed 2");
  p.dry_allowed_length = 1;
  expect_penalties(dry_penalties(p, prompt, output), {{4, 1.0f}}, "range 5, allowed 1");
  p.dry_range = 1000;
  expect_penalties(dry_penalties(p, prompt, output), {{4, 4.0f}}, "range past the history, allowed 1");
}

TEST(SamplingFilters, DryLongestOccurrenceAndCap) {
  // 5 7 | 9 5 7 | 8 9 5 7: after "9 5 7" comes 8 (n = 3); after "5 7" also 9 (n = 2).
  const std::vector<int32_t> history = {5, 7, 9, 5, 7, 8, 9, 5, 7};
  SamplingParams p = dry_params(1.5f, 3.0f, 2);
  expect_penalties(dry_penalties(p, history, {}), {{8, 4.5f}, {9, 1.5f}}, "two candidates");
  // A long repeat overflows base^n: capped.
  std::vector<int32_t> repeat;
  for (int i = 0; i < 3000; ++i) repeat.push_back(i % 2);
  p = dry_params(1.0f, 10.0f, 1);
  const std::vector<DryPenalty> capped = dry_penalties(p, repeat, {});
  ASSERT_EQ(capped.size(), 1u) << "only 0 follows the tail's last token 1";
  EXPECT_EQ(capped[0].id, 0);
  EXPECT_EQ(capped[0].penalty, static_cast<float>(kMaxDryPenalty));
}

TEST(SamplingFilters, DryEqualsTheBruteForceDefinition) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 400; ++trial) {
    const int vocab = 2 + static_cast<int>(rng() % 5);  // few tokens: many repeats
    std::vector<int32_t> prompt(rng() % 40), output(rng() % 30);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % vocab);
    for (int32_t& t : output) t = static_cast<int32_t>(rng() % vocab);
    SamplingParams p = dry_params(0.5f + static_cast<float>(rng() % 4), 1.0f + static_cast<float>(rng() % 3) * 0.5f,
                                  1 + static_cast<int32_t>(rng() % 4));
    if (rng() % 3 == 0) p.dry_range = 1 + static_cast<int32_t>(rng() % 50);
    if (rng() % 2 == 0) p.dry_breakers = {static_cast<int32_t>(rng() % vocab)};
    std::vector<int32_t> history = prompt;
    history.insert(history.end(), output.begin(), output.end());
    expect_penalties(dry_penalties(p, prompt, output), dry_brute_force(p, history),
                     "trial " + std::to_string(trial));
    if (::testing::Test::HasFailure()) return;
  }
}

// ---- Typical-p -------------------------------------------------------------------------------------

TEST(SamplingFilters, TypicalKeepsTheTokensNearestTheEntropy) {
  // p = .4 .3 .2 .1: H = 1.2799; |-log p - H| = .364 .076 .330 1.023, so the typical order is
  // 1, 2, 0, 3 with cumulative .3, .5, .9, 1.
  const std::vector<double> p4 = {0.4, 0.3, 0.2, 0.1};
  double h = 0.0;
  for (double v : p4) h -= v * std::log(v);
  EXPECT_NEAR(h, 1.2799, 1e-4);
  EXPECT_NEAR(std::fabs(-std::log(0.3) - h), 0.0759, 1e-4);
  SamplingParams p;
  p.typical_p = 0.25f;
  expect_distribution(kFour, p, {0.0, 1.0, 0.0, 0.0}, "typical 0.25");
  p.typical_p = 0.45f;
  expect_distribution(kFour, p, {0.0, 0.6, 0.4, 0.0}, "typical 0.45");
  p.typical_p = 0.85f;
  expect_distribution(kFour, p, {0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0.0}, "typical 0.85");
  p.typical_p = 1.0f;
  expect_distribution(kFour, p, {0.4, 0.3, 0.2, 0.1}, "typical 1 = off");
  // After top-k 3 the kept .4 .3 .2 renormalise to 4/9 3/9 2/9: H = 1.0609, scores .250 .038
  // .443: order 1, 0, 2.
  p.top_k = 3;
  p.typical_p = 0.5f;
  expect_distribution(kFour, p, {4.0 / 7, 3.0 / 7, 0.0, 0.0}, "top-k 3 then typical 0.5");
}

// ---- XTC -----------------------------------------------------------------------------------------

TEST(SamplingFilters, XtcRemovesTheTopTokensButTheLeastLikelyOfThem) {
  SamplingParams p;
  p.xtc_probability = 1.0f;
  p.xtc_threshold = 0.25f;  // .4 and .3 reach it: .4 goes
  expect_distribution(kFour, p, {0.0, 0.5, 0.2 / 0.6, 0.1 / 0.6}, "threshold 0.25");
  p.xtc_threshold = 0.15f;  // .4 .3 .2: only .2 stays of them
  expect_distribution(kFour, p, {0.0, 0.0, 2.0 / 3, 1.0 / 3}, "threshold 0.15");
  p.xtc_threshold = 0.35f;  // only .4 reaches it: nothing removed
  expect_distribution(kFour, p, {0.4, 0.3, 0.2, 0.1}, "threshold 0.35, one token");
  p.xtc_threshold = 0.25f;
  p.xtc_probability = 0.0f;
  expect_distribution(kFour, p, {0.4, 0.3, 0.2, 0.1}, "probability 0");
  // Probability 0.5: cut exactly at the positions where the XTC stream's uniform is below it.
  p.xtc_probability = 0.5f;
  int cut = 0;
  for (int64_t pos = 0; pos < 64; ++pos) {
    const bool fires = philox_uniform(p.seed, static_cast<uint64_t>(pos), kXtcStream) < 0.5f;
    cut += fires;
    const SampleDistribution d = sampling_distribution(kFour, p, {}, {}, pos);
    EXPECT_EQ(d.admissible[0] == 0, fires) << "position " << pos;
  }
  EXPECT_GT(cut, 10);
  EXPECT_LT(cut, 54);
}

// ---- Temperature last ------------------------------------------------------------------------------

TEST(SamplingFilters, TemperatureLastDecidesFiltersOnTheUntemperedDistribution) {
  // T = 2 flattens .4 .3 .2 .1 to sqrt(p) / 1.943 = .325 .282 .230 .163. min-p 0.6:
  //  first: threshold .6 · .325 = .195 keeps 0, 1, 2;
  //  last: threshold .6 · .4 = .24 keeps 0, 1, then T = 2 over them.
  SamplingParams p;
  p.temperature = 2.0f;
  p.min_p = 0.6f;
  const double a = std::sqrt(0.4), b = std::sqrt(0.3), c = std::sqrt(0.2);
  expect_distribution(kFour, p, {a / (a + b + c), b / (a + b + c), c / (a + b + c), 0.0}, "temperature first");
  p.temperature_last = true;
  expect_distribution(kFour, p, {a / (a + b), b / (a + b), 0.0, 0.0}, "temperature last");
  // Without a truncation filter the order makes no difference.
  p.min_p = 0.0f;
  const double d = std::sqrt(0.1), s = a + b + c + d;
  expect_distribution(kFour, p, {a / s, b / s, c / s, d / s}, "temperature last, no filter");
}

// ---- Logprobs --------------------------------------------------------------------------------------

TEST(SamplingFilters, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -INFINITY, 2.0f};
  const double z = std::log(std::exp(-1.0) + 1.0 + std::exp(-1.5) + 1.0);  // log sum exp(l - 2)
  const auto lp = [&](double l) { return static_cast<float>(l - 2.0 - z); };
  const TokenLogprobs got = token_logprobs_ref(logits, 2, 3);
  EXPECT_NEAR(got.logprob, lp(0.5), 1e-6);
  ASSERT_EQ(got.top.size(), 3u);
  EXPECT_EQ(got.top[0].id, 1);  // the tie 1 / 4 goes to the lower id
  EXPECT_EQ(got.top[1].id, 4);
  EXPECT_EQ(got.top[2].id, 0);
  EXPECT_NEAR(got.top[0].logprob, lp(2.0), 1e-6);
  EXPECT_NEAR(got.top[1].logprob, lp(2.0), 1e-6);
  EXPECT_NEAR(got.top[2].logprob, lp(1.0), 1e-6);
  EXPECT_EQ(token_logprobs_ref(logits, 3, 0).logprob, -INFINITY);
  EXPECT_TRUE(token_logprobs_ref(logits, 3, 0).top.empty());
  EXPECT_EQ(token_logprobs_ref(logits, 0, 20).top.size(), 5u) << "n past the vocabulary";
}

// ---- Validation ------------------------------------------------------------------------------------

TEST(SamplingFilters, ValidationNamesEachBadField) {
  struct Bad {
    std::string field;
    void (*set)(SamplingParams&);
  };
  const std::vector<Bad> bad = {
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{10, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{2, 1.0f}, {1, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{1, 101.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{1, NAN}}; }},
      {"banned_ids", [](SamplingParams& p) { p.banned_ids = {-1}; }},
      {"banned_ids", [](SamplingParams& p) { p.banned_ids = {3, 3}; }},
      {"banned_ids", [](SamplingParams& p) { p.banned_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; }},
      {"dry_multiplier", [](SamplingParams& p) { p.dry_multiplier = -0.1f; }},
      {"dry_multiplier", [](SamplingParams& p) { p.dry_multiplier = NAN; }},
      {"dry_base", [](SamplingParams& p) { p.dry_base = 0.9f; }},
      {"dry_allowed_length", [](SamplingParams& p) { p.dry_allowed_length = 0; }},
      {"dry_range", [](SamplingParams& p) { p.dry_range = -1; }},
      {"dry_breakers", [](SamplingParams& p) { p.dry_breakers = {11}; }},
      {"typical_p", [](SamplingParams& p) { p.typical_p = 0.0f; }},
      {"typical_p", [](SamplingParams& p) { p.typical_p = 1.5f; }},
      {"xtc_threshold", [](SamplingParams& p) { p.xtc_threshold = 0.0f; }},
      {"xtc_probability", [](SamplingParams& p) { p.xtc_probability = 1.1f; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
  };
  for (const Bad& b : bad) {
    SamplingParams p;
    b.set(p);
    const absl::Status s = validate_sampling_params(p, 10);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.field;
    EXPECT_NE(s.message().find(b.field), std::string::npos) << s.message();
  }
  SamplingParams ok;
  ok.banned_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  ok.logit_bias = {{0, -100.0f}, {9, 100.0f}};
  ok.dry_multiplier = 100.0f;
  ok.dry_base = 10.0f;
  ok.dry_allowed_length = 1000;
  ok.dry_breakers = {0, 9};
  ok.typical_p = 1.0f;
  ok.xtc_threshold = 1.0f;
  ok.xtc_probability = 1.0f;
  ok.logprobs = kMaxLogprobs;
  EXPECT_TRUE(validate_sampling_params(ok, 10).ok());
}

// ---- Chi-square of the CPU backend's draws ------------------------------------------------------

using testing::kChiSquare001;

// Draws `positions` tokens (one row per position, in batches) on the CPU backend and compares the
// counts with the sum of sampling_distribution over the positions (XTC's decision depends on the
// position, so each position has its own expected distribution).
void expect_backend_draws_match(const SamplingParams& params, const std::vector<float>& logits,
                                const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(validate_sampling_params(params, static_cast<int32_t>(logits.size())).ok());
  std::unique_ptr<Backend> be = make_cpu_backend();
  const int64_t vocab = static_cast<int64_t>(logits.size());
  constexpr int64_t kRows = 1000, kBatches = 150;
  std::vector<float> batch_logits;
  for (int64_t r = 0; r < kRows; ++r) batch_logits.insert(batch_logits.end(), logits.begin(), logits.end());
  absl::StatusOr<Tensor> dev = be->allocate(DType::kF32, {kRows, vocab}, "logits");
  absl::StatusOr<Tensor> out = be->allocate(DType::kI32, {kRows}, "ids");
  ASSERT_TRUE(dev.ok() && out.ok());
  be->upload(Tensor::from_vector(batch_logits, {kRows, vocab}), *dev);
  SampleBatch batch;
  batch.rows.assign(kRows, SampleRow{params, 0, prompt, output});
  std::vector<double> expected(vocab, 0.0);
  std::vector<int64_t> counts(vocab, 0);
  for (int64_t b = 0; b < kBatches; ++b) {
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t pos = b * kRows + r;
      batch.rows[r].position = pos;
      const SampleDistribution d = sampling_distribution(logits, params, prompt, output, pos);
      for (int64_t i = 0; i < vocab; ++i) expected[i] += d.probs[i];
    }
    be->sample(*dev, batch, *out);
    for (int64_t r = 0; r < kRows; ++r) {
      const int32_t t = out->data<int32_t>()[r];
      ASSERT_TRUE(t >= 0 && t < vocab);
      ++counts[t];
    }
  }
  double chi2 = 0.0;
  int cells = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is never admissible";
      continue;
    }
    ASSERT_GE(expected[i], 5.0) << "too few draws for a chi-square cell, token " << i;
    chi2 += (counts[i] - expected[i]) * (counts[i] - expected[i]) / expected[i];
    ++cells;
  }
  ASSERT_GE(cells, 2);
  EXPECT_LT(chi2, kChiSquare001[cells - 2]) << cells - 1 << " degrees of freedom";
}

const std::vector<float> kDrawLogits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f, 1.2f, -2.0f};

TEST(SamplingFilters, CpuDrawsMatchTypical) {
  SamplingParams p;
  p.typical_p = 0.7f;
  p.temperature = 0.9f;
  p.seed = 11;
  expect_backend_draws_match(p, kDrawLogits, {}, {}, "typical 0.7");
  p.temperature_last = true;
  p.top_k = 8;
  expect_backend_draws_match(p, kDrawLogits, {}, {}, "typical 0.7, top-k 8, temperature last");
}

TEST(SamplingFilters, CpuDrawsMatchXtc) {
  SamplingParams p;
  p.xtc_threshold = 0.1f;
  p.xtc_probability = 0.5f;
  p.seed = 12;
  expect_backend_draws_match(p, kDrawLogits, {}, {}, "XTC 0.1 at 0.5");
  p.temperature = 1.3f;
  p.dry_multiplier = 0.8f;
  p.banned_ids = {3};
  p.logit_bias = {{9, 2.5f}};
  expect_backend_draws_match(p, kDrawLogits, {0, 1, 2, 0, 1}, {5, 0, 1}, "XTC with bias, a ban and DRY");
}

}  // namespace
}  // namespace exl3
