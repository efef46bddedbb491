// Tests of the reference sampler (kernels/sampling.h) and its Philox RNG (kernels/philox.h):
// known-answer vectors, hand-computed distributions after each filter, chi-square agreement of
// seeded draws with the distribution, admissibility, determinism, greedy and parameter validation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/chi_square.h"
#include "common/sample_distribution_expect.h"
#include "gtest/gtest.h"
#include "kernels/philox.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

// ---- Philox ------------------------------------------------------------------------------------

struct PhiloxKat {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};

// Random123's published known-answer vectors for philox4x32-10 (kat_vectors).
constexpr PhiloxKat kPhiloxKats[] = {
    {{{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
};

constexpr bool same_block(PhiloxCounter a, PhiloxCounter b) {
  return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
}

// The cipher is usable at compile time (and hence from device code with relaxed constexpr).
static_assert(same_block(philox4x32_10(kPhiloxKats[0].counter, kPhiloxKats[0].key), kPhiloxKats[0].expected));

TEST(Philox, KnownAnswerVectors) {
  for (const PhiloxKat& kat : kPhiloxKats) {
    const PhiloxCounter got = philox4x32_10(kat.counter, kat.key);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got.v[i], kat.expected.v[i]) << "word " << i << " of counter " << std::hex << kat.counter.v[0];
    }
  }
}

TEST(Philox, UniformLayoutAndRange) {
  const uint64_t seed = 0x0123456789abcdefull;
  const uint64_t position = 0x00000002'00000007ull;
  const uint64_t stream = 0x00000005'00000003ull;
  const PhiloxCounter block =
      philox4x32_10({{0x00000007u, 0x00000002u, 0x00000003u, 0x00000005u}}, {{0x89abcdefu, 0x01234567u}});
  EXPECT_EQ(philox_uniform(seed, position, stream), static_cast<float>(block.v[0] >> 8) / 16777216.0f);

  double sum = 0.0;
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    const float u = philox_uniform(7, static_cast<uint64_t>(i), 0);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    const float scaled = u * 16777216.0f;
    ASSERT_EQ(scaled, std::floor(scaled)) << "not a multiple of 2^-24";
    sum += u;
  }
  // Mean of U[0,1): 0.5 with standard error sqrt(1/12 / n) = 0.0009; allow 5 sigma.
  EXPECT_NEAR(sum / kDraws, 0.5, 0.0046);
  EXPECT_NE(philox_uniform(7, 3, 0), philox_uniform(7, 3, 1));
  EXPECT_NE(philox_uniform(7, 3, 0), philox_uniform(8, 3, 0));
}

// ---- Hand-computed distributions ---------------------------------------------------------------

using testing::log_probs;

std::vector<double> softmax(const std::vector<double>& logits) {
  double m = logits[0];
  for (double l : logits) m = std::max(m, l);
  double z = 0.0;
  for (double l : logits) z += std::exp(l - m);
  std::vector<double> out;
  for (double l : logits) out.push_back(std::exp(l - m) / z);
  return out;
}

using testing::expect_distribution;

// Logits whose softmax is exactly {0.4, 0.3, 0.2, 0.1}.
const std::vector<float> kFourLogits = log_probs({0.4, 0.3, 0.2, 0.1});

TEST(SamplingDistribution, TemperatureScalesLogits) {
  SamplingParams p;
  expect_distribution(kFourLogits, p, {0.4, 0.3, 0.2, 0.1}, "T=1");
  p.temperature = 0.5f;  // p^2: .16 .09 .04 .01, sum .30
  expect_distribution(kFourLogits, p, {16.0 / 30, 9.0 / 30, 4.0 / 30, 1.0 / 30}, "T=0.5");
  p.temperature = 2.0f;  // sqrt(p)
  const double s = std::sqrt(0.4) + std::sqrt(0.3) + std::sqrt(0.2) + std::sqrt(0.1);
  expect_distribution(kFourLogits, p, {std::sqrt(0.4) / s, std::sqrt(0.3) / s, std::sqrt(0.2) / s, std::sqrt(0.1) / s},
                      "T=2");
}

TEST(SamplingDistribution, TopK) {
  SamplingParams p;
  p.top_k = 2;
  expect_distribution(kFourLogits, p, {4.0 / 7, 3.0 / 7, 0, 0}, "k=2");
  p.top_k = 3;
  expect_distribution(kFourLogits, p, {4.0 / 9, 3.0 / 9, 2.0 / 9, 0}, "k=3");
  p.top_k = 1;
  expect_distribution(kFourLogits, p, {1, 0, 0, 0}, "k=1");
  p.top_k = 4;
  expect_distribution(kFourLogits, p, {0.4, 0.3, 0.2, 0.1}, "k=vocab");
  p.top_k = 1000;
  expect_distribution(kFourLogits, p, {0.4, 0.3, 0.2, 0.1}, "k>vocab");
  // Ties at the boundary keep the lowest ids.
  p.top_k = 2;
  expect_distribution({0.0f, 1.0f, 1.0f, 1.0f}, p, {0, 0.5, 0.5, 0}, "k=2 with ties");
  // Ranking is by logit, not by id: the best tokens may sit anywhere.
  expect_distribution(log_probs({0.1, 0.2, 0.3, 0.4}), p, {0, 0, 3.0 / 7, 4.0 / 7}, "k=2 reversed");
}

TEST(SamplingDistribution, TopP) {
  SamplingParams p;
  p.top_p = 0.5f;  // cumulative .4 < .5, .7 >= .5
  expect_distribution(kFourLogits, p, {4.0 / 7, 3.0 / 7, 0, 0}, "p=0.5");
  p.top_p = 0.3f;  // the first token alone reaches it
  expect_distribution(kFourLogits, p, {1, 0, 0, 0}, "p=0.3");
  p.top_p = 0.85f;  // .4 .7 .9
  expect_distribution(kFourLogits, p, {4.0 / 9, 3.0 / 9, 2.0 / 9, 0}, "p=0.85");
  p.top_p = 0.95f;
  expect_distribution(kFourLogits, p, {0.4, 0.3, 0.2, 0.1}, "p=0.95");
  p.top_p = 1e-6f;  // always at least one token
  expect_distribution(kFourLogits, p, {1, 0, 0, 0}, "p tiny");
  p.top_p = 1.0f;  // off: even a negligible tail survives
  expect_distribution({0.0f, -40.0f}, p, {1.0 / (1.0 + std::exp(-40.0)), std::exp(-40.0) / (1.0 + std::exp(-40.0))},
                      "p=1");
}

TEST(SamplingDistribution, TopPRenormalisesAfterTopK) {
  SamplingParams p;
  p.top_k = 3;  // {4/9, 3/9, 2/9}: cumulative .444, .778 >= .75
  p.top_p = 0.75f;
  expect_distribution(kFourLogits, p, {4.0 / 7, 3.0 / 7, 0, 0}, "k=3 then p=0.75");
}

TEST(SamplingDistribution, TopPAfterTemperature) {
  SamplingParams p;
  p.temperature = 0.5f;  // .533 .3 .133 .033: cumulative .533, .833 >= .8
  p.top_p = 0.8f;
  expect_distribution(kFourLogits, p, {16.0 / 25, 9.0 / 25, 0, 0}, "T=0.5 then p=0.8");
}

TEST(SamplingDistribution, MinP) {
  SamplingParams p;
  p.min_p = 0.3f;  // threshold .12
  expect_distribution(kFourLogits, p, {4.0 / 9, 3.0 / 9, 2.0 / 9, 0}, "min_p=0.3");
  p.min_p = 0.6f;  // threshold .24
  expect_distribution(kFourLogits, p, {4.0 / 7, 3.0 / 7, 0, 0}, "min_p=0.6");
  p.min_p = 1.0f;
  expect_distribution(kFourLogits, p, {1, 0, 0, 0}, "min_p=1");
  p.min_p = 1.0f;  // ties with the max survive min_p = 1
  expect_distribution({2.0f, 0.0f, 2.0f}, p, {0.5, 0, 0.5}, "min_p=1 with ties");
  p.min_p = 0.8f;  // after top-p {4/7, 3/7}: threshold .457 drops 3/7
  p.top_p = 0.5f;
  expect_distribution(kFourLogits, p, {1, 0, 0, 0}, "p=0.5 then min_p=0.8");
  p = SamplingParams{};
  p.temperature = 2.0f;  // sqrt(p) / sqrt(.4): .866 .707 .5 -> min_p=0.6 keeps three
  p.min_p = 0.6f;
  const double s = std::sqrt(0.4) + std::sqrt(0.3) + std::sqrt(0.2);
  expect_distribution(kFourLogits, p, {std::sqrt(0.4) / s, std::sqrt(0.3) / s, std::sqrt(0.2) / s, 0},
                      "T=2 then min_p=0.6");
}

const std::vector<float> kPenaltyLogits = {2.0f, -1.0f, 0.5f, 1.0f, 0.0f};

TEST(SamplingDistribution, RepetitionPenalty) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  expect_distribution(kPenaltyLogits, p, {0, 1}, {}, softmax({1.0, -2.0, 0.5, 1.0, 0.0}), "prompt only");
  expect_distribution(kPenaltyLogits, p, {0}, {1}, softmax({1.0, -2.0, 0.5, 1.0, 0.0}), "prompt and output");
  expect_distribution(kPenaltyLogits, p, {0, 0, 0}, {0, 0}, softmax({1.0, -1.0, 0.5, 1.0, 0.0}), "repeats count once");
  expect_distribution(kPenaltyLogits, p, {4}, {}, softmax({2.0, -1.0, 0.5, 1.0, 0.0}), "zero logit stays");
  p.repetition_penalty = 0.5f;  // < 1 encourages repetition
  expect_distribution(kPenaltyLogits, p, {}, {0, 1}, softmax({4.0, -0.5, 0.5, 1.0, 0.0}), "penalty < 1");
}

TEST(SamplingDistribution, PresenceAndFrequencyPenalties) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  // Prompt tokens are ignored; token 0 is in the output twice, token 3 once.
  expect_distribution(kPenaltyLogits, p, {2}, {0, 0, 3}, softmax({1.0, -1.0, 0.5, 0.25, 0.0}), "both");
  p.presence_penalty = -1.0f;
  p.frequency_penalty = 0.0f;
  expect_distribution(kPenaltyLogits, p, {}, {4}, softmax({2.0, -1.0, 0.5, 1.0, 1.0}), "negative presence");
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 2.0f;
  expect_distribution(kPenaltyLogits, p, {}, {3, 3, 3}, softmax({2.0, -1.0, 0.5, -5.0, 0.0}), "frequency");
}

TEST(SamplingDistribution, RepetitionBeforePresenceBeforeTemperature) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 1.0f;
  p.temperature = 0.5f;
  // 2 / 2 - 1 = 0 and -1 * 2 - 1 = -3, then doubled by T = 0.5.
  expect_distribution(kPenaltyLogits, p, {}, {0, 1}, softmax({0.0, -6.0, 1.0, 2.0, 0.0}), "order");
}

TEST(SamplingDistribution, NegativeInfinityLogitsNeverAdmissibleAfterFilters) {
  SamplingParams p;
  p.min_p = 0.01f;
  const float ninf = -INFINITY;
  expect_distribution({ninf, 1.0f, ninf, 1.0f}, p, {0, 0.5, 0, 0.5}, "masked");
}

// ---- Greedy ------------------------------------------------------------------------------------

TEST(Sampling, GreedyIsArgmaxOfPenalisedLogitsWithoutRandomness) {
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 2.9f};
  for (uint64_t seed : {0ull, 1ull, 12345ull}) {
    p.seed = seed;
    for (int64_t pos = 0; pos < 50; ++pos) {
      EXPECT_EQ(sample_ref(logits, p, {}, {}, pos), 1) << "ties: lowest id";
    }
  }
  // Filters do not apply to greedy; penalties do.
  p.top_k = 3;
  p.top_p = 0.1f;
  p.min_p = 0.9f;
  EXPECT_EQ(sample_ref(logits, p, {}, {}, 0), 1);
  const std::vector<int32_t> prompt = {1, 2};
  const std::vector<int32_t> output = {1};
  p.repetition_penalty = 1.1f;
  EXPECT_EQ(sample_ref(logits, p, prompt, {}, 0), 4) << "3/1.1 = 2.73 < 2.9";
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.05f;
  EXPECT_EQ(sample_ref(logits, p, {}, output, 0), 2);
  const SampleDistribution d = sampling_distribution(logits, p, {}, output);
  EXPECT_EQ(d.probs, (std::vector<double>{0, 0, 1, 0, 0}));
  EXPECT_EQ(d.admissible, (std::vector<uint8_t>{0, 0, 1, 0, 0}));
}

// ---- Draws -------------------------------------------------------------------------------------

using testing::kChiSquare001;

struct DrawCase {
  std::string name;
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
};

std::vector<DrawCase> draw_cases() {
  std::vector<DrawCase> cases;
  auto add = [&](std::string name, auto set, std::vector<int32_t> prompt = {}, std::vector<int32_t> output = {}) {
    DrawCase c{std::move(name), SamplingParams{}, std::move(prompt), std::move(output)};
    c.params.seed = 0x5eed0000ull + cases.size();
    set(c.params);
    cases.push_back(std::move(c));
  };
  add("plain", [](SamplingParams&) {});
  add("temperature 0.7, top-k 5", [](SamplingParams& p) {
    p.temperature = 0.7f;
    p.top_k = 5;
  });
  add("temperature 1.3, top-p 0.8", [](SamplingParams& p) {
    p.temperature = 1.3f;
    p.top_p = 0.8f;
  });
  add("min-p 0.1", [](SamplingParams& p) { p.min_p = 0.1f; });
  add("everything",
      [](SamplingParams& p) {
        p.temperature = 0.9f;
        p.top_k = 7;
        p.top_p = 0.95f;
        p.min_p = 0.05f;
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.3f;
      },
      {0, 3}, {1, 1, 5});
  return cases;
}

const std::vector<float> kDrawLogits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f, 1.2f, -2.0f};

TEST(Sampling, DrawFrequenciesMatchDistribution) {
  constexpr int64_t kDraws = 200000;
  for (const DrawCase& c : draw_cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(validate_sampling_params(c.params, static_cast<int32_t>(kDrawLogits.size())).ok());
    const SampleDistribution d = sampling_distribution(kDrawLogits, c.params, c.prompt, c.output);
    std::vector<int64_t> counts(kDrawLogits.size(), 0);
    for (int64_t pos = 0; pos < kDraws; ++pos) {
      const int32_t t = sample_ref(kDrawLogits, c.params, c.prompt, c.output, pos);
      ASSERT_GE(t, 0);
      ASSERT_LT(t, static_cast<int32_t>(kDrawLogits.size()));
      ASSERT_TRUE(d.admissible[t]) << "token " << t << " drawn at position " << pos;
      ++counts[t];
    }
    double chi2 = 0.0;
    int cells = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const double expected = d.probs[i] * kDraws;
      if (expected == 0.0) {
        EXPECT_EQ(counts[i], 0) << "token " << i;
        continue;
      }
      ASSERT_GE(expected, 5.0) << "too few draws for a chi-square cell";
      chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
      ++cells;
    }
    ASSERT_GE(cells, 2);
    EXPECT_LT(chi2, kChiSquare001[cells - 2]) << cells - 1 << " degrees of freedom";
  }
}

// The draw is the inverse CDF at u = philox_uniform(seed, position, kSampleStream) over the
// admissible tokens in ascending id order.
TEST(Sampling, DrawIsInverseCdfInIdOrder) {
  SamplingParams p;
  p.top_k = 6;
  p.seed = 99;
  const SampleDistribution d = sampling_distribution(kDrawLogits, p, {}, {});
  for (int64_t pos = 0; pos < 2000; ++pos) {
    const double u = philox_uniform(p.seed, static_cast<uint64_t>(pos), kSampleStream);
    int32_t want = -1;
    double cumulative = 0.0;
    for (size_t i = 0; i < d.probs.size() && want < 0; ++i) {
      cumulative += d.probs[i];
      if (d.probs[i] > 0 && u < cumulative) want = static_cast<int32_t>(i);
    }
    ASSERT_EQ(sample_ref(kDrawLogits, p, {}, {}, pos), want) << "position " << pos << " u " << u;
  }
}

// A larger vocabulary with random logits: every draw is in the top-k/top-p/min-p set, checked
// against sets computed here from the ranked probabilities.
TEST(Sampling, DrawsStayInAdmissibleSet) {
  constexpr int kVocab = 500;
  std::mt19937 gen(1234);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = static_cast<float>(gen() % 20000) / 2000.0f - 5.0f;

  std::vector<int32_t> ranked(kVocab);
  for (int i = 0; i < kVocab; ++i) ranked[i] = i;
  std::sort(ranked.begin(), ranked.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> probs = softmax(std::vector<double>(logits.begin(), logits.end()));

  struct Filter {
    int32_t top_k;
    float top_p;
    float min_p;
  };
  for (const Filter f :
       {Filter{20, 1.0f, 0.0f}, Filter{0, 0.5f, 0.0f}, Filter{0, 1.0f, 0.3f}, Filter{50, 0.9f, 0.1f}}) {
    SamplingParams p;
    p.top_k = f.top_k;
    p.top_p = f.top_p;
    p.min_p = f.min_p;
    p.seed = 31337;
    // Apply each filter to the ranked list as its definition reads.
    std::vector<int32_t> kept(ranked.begin(), ranked.begin() + (f.top_k > 0 ? f.top_k : kVocab));
    auto mass = [&] {
      double m = 0;
      for (int32_t id : kept) m += probs[id];
      return m;
    };
    if (f.top_p < 1.0f) {
      const double total = mass();
      double c = 0;
      size_t n = 0;
      while (n < kept.size() && c < f.top_p) c += probs[kept[n++]] / total;
      kept.resize(n);
    }
    const double max_prob = probs[kept[0]];
    std::erase_if(kept, [&](int32_t id) { return probs[id] < f.min_p * max_prob; });
    std::vector<uint8_t> allowed(kVocab, 0);
    for (int32_t id : kept) allowed[id] = 1;

    const SampleDistribution d = sampling_distribution(logits, p, {}, {});
    EXPECT_EQ(d.admissible, allowed) << "top_k " << f.top_k << " top_p " << f.top_p << " min_p " << f.min_p;
    for (int64_t pos = 0; pos < 5000; ++pos) {
      const int32_t t = sample_ref(logits, p, {}, {}, pos);
      ASSERT_TRUE(allowed[t]) << "token " << t << " at position " << pos;
    }
  }
}

std::vector<int32_t> draw_sequence(const SamplingParams& p, int64_t n) {
  std::vector<int32_t> out;
  for (int64_t pos = 0; pos < n; ++pos) out.push_back(sample_ref(kDrawLogits, p, {}, {}, pos));
  return out;
}

TEST(Sampling, SameSeedSameTokensDifferentSeedsDiffer) {
  SamplingParams p;
  p.seed = 42;
  const std::vector<int32_t> a = draw_sequence(p, 200);
  EXPECT_EQ(draw_sequence(p, 200), a);
  // A draw depends only on (seed, position): out of order and alone it is the same.
  for (int64_t pos : {199, 0, 117, 3}) EXPECT_EQ(sample_ref(kDrawLogits, p, {}, {}, pos), a[pos]);
  for (uint64_t seed : {43ull, 0ull, 42ull << 32, ~0ull}) {
    p.seed = seed;
    EXPECT_NE(draw_sequence(p, 200), a) << "seed " << seed;
  }
}

// ---- Validation --------------------------------------------------------------------------------

void expect_rejected(const SamplingParams& p, const std::string& field) {
  const absl::Status s = validate_sampling_params(p, 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

TEST(ValidateSamplingParams, RejectsEachBadField) {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return p;
  };
  for (float t : {-0.1f, nan, inf}) {
    expect_rejected(with([&](SamplingParams& p) { p.temperature = t; }), "temperature");
  }
  expect_rejected(with([](SamplingParams& p) { p.top_k = -1; }), "top_k");
  for (float v : {0.0f, -0.5f, 1.01f, nan}) {
    expect_rejected(with([&](SamplingParams& p) { p.top_p = v; }), "top_p");
  }
  for (float v : {-0.01f, 1.5f, nan}) {
    expect_rejected(with([&](SamplingParams& p) { p.min_p = v; }), "min_p");
  }
  for (float v : {0.0f, -1.0f, nan, inf}) {
    expect_rejected(with([&](SamplingParams& p) { p.repetition_penalty = v; }), "repetition_penalty");
  }
  for (float v : {2.5f, -2.01f, nan}) {
    expect_rejected(with([&](SamplingParams& p) { p.presence_penalty = v; }), "presence_penalty");
    expect_rejected(with([&](SamplingParams& p) { p.frequency_penalty = v; }), "frequency_penalty");
  }
}

TEST(ValidateSamplingParams, AcceptsBoundaries) {
  SamplingParams p;
  EXPECT_TRUE(validate_sampling_params(p, 100).ok());
  p.temperature = 0.0f;
  p.top_k = 1000;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.repetition_penalty = 1e-3f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  EXPECT_TRUE(validate_sampling_params(p, 100).ok());
  p.min_p = 0.0f;
  p.top_p = 1e-6f;
  EXPECT_TRUE(validate_sampling_params(p, 100).ok());
}

}  // namespace
}  // namespace exl3
