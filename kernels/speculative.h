// Speculative decoding's verification step (Leviathan et al. 2023, Chen et al. 2023): a draft model
// proposes tokens, the target scores all of them in one forward, and rejection sampling keeps a
// prefix of the proposal so that every emitted token is distributed exactly as the target's own
// sampler would have drawn it. Pure functions over sampling distributions (sampling.h), computed in
// fp64 on the host; all randomness is Philox (philox.h), so every rank decides the same.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling.h"

namespace exl3 {

// Philox streams of speculative decoding at a token's position (the sampler itself uses streams
// below 8): the draft's draw of its proposal, the acceptance test, and the draw from the residual
// distribution after a rejection. The bonus token after a fully accepted proposal is an ordinary
// draw (kSampleStream), so a round that accepts nothing new draws as plain decoding would.
inline constexpr uint64_t kDraftStream = 8;
inline constexpr uint64_t kAcceptStream = 9;
inline constexpr uint64_t kResidualStream = 10;

// Inverse-CDF draw over `probs` in ascending id order: the first id whose cumulative probability
// exceeds u; rounding past the end gives the last id with nonzero probability. probs sums to 1
// (within rounding), u in [0, 1).
int32_t draw_from(std::span<const double> probs, double u);

struct VerifyResult {
  // Tokens to append: the accepted prefix of the proposal, then one more (the target's draw from
  // the residual distribution at the first rejection, or its bonus draw after the last proposal).
  std::vector<int32_t> tokens;
  int32_t accepted = 0;  // proposal tokens kept (tokens.size() - 1)
};

// Contract: proposal[i] (i < n) was drawn by the draft from draft_probs[i], the draft's sampling
// distribution for position first_position + i (draft_probs[i][proposal[i]] > 0); target_probs[j]
// (j <= n) is the target's sampling distribution for position first_position + j given the context
// and proposal[0..j). Each distribution has the vocabulary's size and sums to 1.
// For i = 0..n-1: u = philox_uniform(seed, first_position + i, kAcceptStream); keep proposal[i] when
// u · q(x) < p(x) (probability min(1, p/q)). At the first rejection, draw from
// r = max(0, p − q) / Σ max(0, p − q) with u = philox_uniform(seed, position, kResidualStream) and
// stop (when r has no mass, from p instead). After n acceptances draw the bonus token from
// target_probs[n] with u = philox_uniform(seed, first_position + n, kSampleStream).
// With one-hot target distributions (temperature 0) this keeps proposals while they equal the
// target's argmax and then emits the argmax: exactly greedy decoding.
VerifyResult verify_proposal(std::span<const int32_t> proposal, std::span<const std::vector<double>> draft_probs,
                             std::span<const std::vector<double>> target_probs, uint64_t seed,
                             int64_t first_position);

}  // namespace exl3
