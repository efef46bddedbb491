// Tests of speculative decoding's rejection-sampling verification (kernels/speculative.h): hand
// cases of greedy verification, the inverse-CDF draw, and chi-square tests that tokens emitted
// through draft-and-verify rounds follow the target's distribution, not the draft's.
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/chi_square.h"
#include "gtest/gtest.h"
#include "kernels/philox.h"
#include "kernels/speculative.h"

namespace exl3 {
namespace {

std::vector<double> one_hot(int32_t id, int32_t vocab) {
  std::vector<double> p(vocab, 0.0);
  p[id] = 1.0;
  return p;
}

TEST(DrawFrom, InverseCdfInAscendingIdOrder) {
  const std::vector<double> p{0.0, 0.25, 0.0, 0.5, 0.25};
  EXPECT_EQ(draw_from(p, 0.0), 1);
  EXPECT_EQ(draw_from(p, 0.2499), 1);
  EXPECT_EQ(draw_from(p, 0.25), 3);
  EXPECT_EQ(draw_from(p, 0.7499), 3);
  EXPECT_EQ(draw_from(p, 0.75), 4);
  // Rounding past the end gives the last id with mass, never a zero-probability id.
  EXPECT_EQ(draw_from(std::vector<double>{0.3, 0.3, 0.0}, 0.9999), 1);
}

TEST(VerifyProposal, GreedyKeepsMatchingPrefixThenTargetArgmax) {
  const int32_t vocab = 6;
  const std::vector<int32_t> proposal{2, 4, 1};
  std::vector<std::vector<double>> q{one_hot(2, vocab), one_hot(4, vocab), one_hot(1, vocab)};
  std::vector<std::vector<double>> p{one_hot(2, vocab), one_hot(4, vocab), one_hot(5, vocab), one_hot(0, vocab)};
  for (uint64_t seed : {1ull, 77ull, 123456789ull}) {
    const VerifyResult r = verify_proposal(proposal, q, p, seed, 40);
    EXPECT_EQ(r.accepted, 2);
    EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 4, 5})) << "seed " << seed;
  }
  // Every proposal right: all kept, then the bonus token is the last target's argmax.
  p[2] = one_hot(1, vocab);
  const VerifyResult all = verify_proposal(proposal, q, p, 9, 0);
  EXPECT_EQ(all.accepted, 3);
  EXPECT_EQ(all.tokens, (std::vector<int32_t>{2, 4, 1, 0}));
  // First proposal wrong: nothing kept, the target's choice at that position is emitted.
  p[0] = one_hot(3, vocab);
  const VerifyResult none = verify_proposal(proposal, q, p, 9, 0);
  EXPECT_EQ(none.accepted, 0);
  EXPECT_EQ(none.tokens, (std::vector<int32_t>{3}));
}

TEST(VerifyProposal, EmptyProposalIsAnOrdinaryDraw) {
  const std::vector<double> p{0.1, 0.2, 0.3, 0.4};
  for (uint64_t seed = 1; seed < 50; ++seed) {
    const VerifyResult r = verify_proposal({}, {}, std::vector<std::vector<double>>{p}, seed, 17);
    ASSERT_EQ(r.tokens.size(), 1u);
    EXPECT_EQ(r.accepted, 0);
    EXPECT_EQ(r.tokens[0], draw_from(p, philox_uniform(seed, 17, kSampleStream)));
  }
}

// Decoding simulated with context-free distributions: at position k the target's distribution is
// kTarget[k % 3] and the draft's kDraft[k % 3]. Rounds of `draft_tokens` proposals run until
// `length` tokens exist; returns them.
constexpr int32_t kVocab = 5;
const std::array<std::vector<double>, 3> kTarget{std::vector<double>{0.40, 0.30, 0.15, 0.10, 0.05},
                                                 std::vector<double>{0.05, 0.05, 0.20, 0.30, 0.40},
                                                 std::vector<double>{0.20, 0.20, 0.20, 0.20, 0.20}};
const std::array<std::vector<double>, 3> kDraft{std::vector<double>{0.10, 0.10, 0.40, 0.30, 0.10},
                                                std::vector<double>{0.25, 0.25, 0.25, 0.25, 0.00},
                                                std::vector<double>{0.60, 0.10, 0.10, 0.10, 0.10}};

std::vector<int32_t> simulate(uint64_t seed, int draft_tokens, int length, int* rounds) {
  std::vector<int32_t> tokens;
  while (static_cast<int>(tokens.size()) < length) {
    const int64_t first = static_cast<int64_t>(tokens.size());
    std::vector<int32_t> proposal;
    std::vector<std::vector<double>> q, p;
    for (int i = 0; i < draft_tokens; ++i) {
      const std::vector<double>& draft = kDraft[(first + i) % 3];
      proposal.push_back(draw_from(draft, philox_uniform(seed, first + i, kDraftStream)));
      q.push_back(draft);
      p.push_back(kTarget[(first + i) % 3]);
    }
    p.push_back(kTarget[(first + draft_tokens) % 3]);
    const VerifyResult r = verify_proposal(proposal, q, p, seed, first);
    EXPECT_EQ(r.tokens.size(), static_cast<size_t>(r.accepted) + 1);
    tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
    ++*rounds;
  }
  tokens.resize(length);
  return tokens;
}

using testing::chi_square;
using testing::kChiSquare001;

TEST(VerifyProposal, EmittedTokensFollowTheTargetNotTheDraft) {
  constexpr int64_t kRuns = 40000;
  constexpr int kLength = 4;
  std::array<std::vector<int64_t>, kLength> marginal;
  for (auto& m : marginal) m.assign(kVocab, 0);
  std::vector<int64_t> joint(kVocab * kVocab, 0);  // (token 0, token 1)
  int rounds = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kRuns); ++seed) {
    const std::vector<int32_t> t = simulate(seed, 3, kLength, &rounds);
    for (int k = 0; k < kLength; ++k) ++marginal[k][t[k]];
    ++joint[t[0] * kVocab + t[1]];
  }
  // Critical values of chi-square at p = 0.001: kChiSquare001[3] for 4 degrees of freedom, 51.18 for 24.
  for (int k = 0; k < kLength; ++k) {
    EXPECT_LT(chi_square(marginal[k], kTarget[k % 3], kRuns), kChiSquare001[3]) << "position " << k;
    EXPECT_GT(chi_square(marginal[k], kDraft[k % 3], kRuns), 1000.0) << "position " << k << " looks like the draft";
  }
  std::vector<double> product(kVocab * kVocab);
  for (int a = 0; a < kVocab; ++a) {
    for (int b = 0; b < kVocab; ++b) product[a * kVocab + b] = kTarget[0][a] * kTarget[1][b];
  }
  EXPECT_LT(chi_square(joint, product, kRuns), 51.18);
  // Fewer rounds than tokens: drafting saved target forwards.
  EXPECT_LT(rounds, kRuns * kLength);
}

TEST(VerifyProposal, FirstAcceptanceRateIsTheOverlapOfTheDistributions) {
  // P(accept proposal 0) = Σ min(p, q) = 0.10 + 0.10 + 0.15 + 0.10 + 0.05 = 0.50.
  constexpr int64_t kRuns = 40000;
  int64_t accepted = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(kRuns); ++seed) {
    const int32_t x = draw_from(kDraft[0], philox_uniform(seed, 0, kDraftStream));
    const VerifyResult r = verify_proposal(std::vector<int32_t>{x}, std::vector<std::vector<double>>{kDraft[0]},
                                           std::vector<std::vector<double>>{kTarget[0], kTarget[1]}, seed, 0);
    accepted += r.accepted;
  }
  const double rate = static_cast<double>(accepted) / kRuns;
  EXPECT_NEAR(rate, 0.50, 4.0 * std::sqrt(0.25 / kRuns));
}

}  // namespace
}  // namespace exl3
