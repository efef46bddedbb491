// Token sampling: the parameters of one request, their validation, and the reference sampler
// (ref/sample_ref.cpp) that defines what the CUDA sampler must compute. Draws come from the
// counter-based RNG in kernels/philox.h, so every rank samples the same token without a broadcast.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/philox.h"

namespace exl3 {

// An additive bias on one token's logit.
struct TokenBias {
  int32_t id = 0;
  float bias = 0.0f;
};

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, no randomness)
  int32_t top_k = 0;                // 0 = off; k >= vocab size keeps every token
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off
  float presence_penalty = 0.0f;    // 0 = off
  float frequency_penalty = 0.0f;   // 0 = off
  uint64_t seed = 0;
  std::vector<TokenBias> logit_bias;  // ids strictly increasing; empty = off
  std::vector<int32_t> banned_ids;    // strictly increasing; never sampled; empty = off
  float dry_multiplier = 0.0f;        // 0 = off
  float dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  int32_t dry_range = 0;              // last tokens of the history DRY looks at; 0 = all
  std::vector<int32_t> dry_breakers;  // sequence-breaker ids, strictly increasing
  float typical_p = 1.0f;             // 1 = off
  float xtc_threshold = 0.1f;
  float xtc_probability = 0.0f;       // 0 = off
  bool temperature_last = false;      // temperature after the truncation filters
  int32_t logprobs = 0;               // top alternatives reported per token; 0 = off
};

// Philox stream of the token draw; other streams are free for other per-position randomness.
inline constexpr uint64_t kSampleStream = 0;
// Philox stream of XTC's decision whether to cut the most likely tokens at a position.
inline constexpr uint64_t kXtcStream = 1;
// Most alternatives SamplingParams::logprobs may ask for.
inline constexpr int32_t kMaxLogprobs = 20;
// Largest DRY penalty: base^(n - allowed_length) overflows for long repeats; a capped penalty
// still sends the token's logit ~1e30 down and keeps every logit finite.
inline constexpr double kMaxDryPenalty = 1e30;

// INVALID_ARGUMENT naming the field and its allowed range unless: temperature finite and >= 0,
// top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, repetition_penalty finite and > 0,
// presence_penalty and frequency_penalty in [-2, 2]; logit_bias ids in [0, vocab) strictly
// increasing with biases in [-100, 100]; banned_ids in [0, vocab) strictly increasing and fewer
// than vocab (banning every token is refused); dry_multiplier in [0, 100], dry_base in [1, 10],
// dry_allowed_length in [1, 1000], dry_range >= 0, dry_breakers in [0, vocab) strictly increasing;
// 0 < typical_p <= 1; xtc_threshold in (0, 1]; xtc_probability in [0, 1]; logprobs in
// [0, kMaxLogprobs]. vocab_size > 0 (a caller invariant).
absl::Status validate_sampling_params(const SamplingParams& params, int32_t vocab_size);

// A token's penalty on the DRY pass (step 4 below), as the sampler subtracts it.
struct DryPenalty {
  int32_t id = 0;
  float penalty = 0.0f;  // > 0
};

// DRY ("don't repeat yourself") over the history h = prompt_ids ++ output_ids, restricted to its
// last dry_range tokens when dry_range > 0 (L tokens). For a candidate c, n(c) is the largest n
// such that for some earlier occurrence h[j] = c (j < L), h[j - n, j) equals the last n tokens
// h[L - n, L) and that span holds no dry_breakers id (n <= j). If n(c) >= dry_allowed_length the
// penalty is min(dry_multiplier · dry_base^(n(c) - dry_allowed_length), kMaxDryPenalty) computed
// in fp64 and rounded to fp32. Returns the penalised ids in increasing order (empty when
// dry_multiplier is 0). O(L + |dry_breakers|·log): one Z-function pass over the reversed history.
std::vector<DryPenalty> dry_penalties(const SamplingParams& params, std::span<const int32_t> prompt_ids,
                                      std::span<const int32_t> output_ids);

// The distribution a draw is taken from, over the whole vocabulary.
struct SampleDistribution {
  std::vector<double> probs;        // [vocab]: sums to 1 over the admissible tokens, 0 elsewhere
  std::vector<uint8_t> admissible;  // [vocab]: 1 where the token survived every filter
};

// Contract (params validated; logits [vocab] fp32, none NaN or +inf, at least one finite after the
// bans; every id in prompt_ids/output_ids in [0, vocab)). In order, in fp64 from the fp32 logits:
//  1. logit bias and bans: logit += bias for each logit_bias entry; banned ids -> -inf and never
//     admissible (other -inf logits stay admissible with probability 0 unless a filter drops them);
//  2. repetition penalty (HF): for each distinct id in prompt_ids ∪ output_ids,
//     logit > 0 ? logit / penalty : logit * penalty;
//  3. presence/frequency penalties (OpenAI), over output_ids only:
//     logit -= presence · [count > 0] + frequency · count;
//  4. DRY: logit -= penalty for each entry of dry_penalties() (the fp32 penalty widened);
//  5. temperature 0: the one admissible token is the argmax of these processed logits (ties:
//     lowest id) and steps 6-12 are skipped;
//  6. filter weights w = exp((logit - max logit) / t), t = temperature, or 1 with
//     temperature_last. Ranking for steps 7-9: processed logit descending, ties by lowest id
//     first; "renormalised" = p = w / (sum of w over the tokens still kept);
//  7. top-k: keep the k best-ranked tokens;
//  8. top-p: over the kept tokens renormalised, keep the shortest best-ranked prefix whose
//     cumulative probability is >= top_p (at least one token; top_p = 1 keeps all);
//  9. min-p: over the kept tokens renormalised, keep those with p >= min_p · max p;
// 10. typical-p (locally typical sampling): over the kept tokens renormalised, H = -sum p·log p
//     (terms with p = 0 are 0), score = |-log p - H| (+inf for p = 0); order the kept tokens by
//     score ascending, ties by lowest id, and keep the shortest prefix whose cumulative p is
//     >= typical_p (at least one token; typical_p = 1 keeps all);
// 11. XTC: when xtc_probability > 0 and philox_uniform(seed, position, kXtcStream) <
//     xtc_probability, over the kept tokens renormalised, the set X of those with
//     p >= xtc_threshold; if X holds two or more tokens, all of X but its lowest-ranked member
//     are dropped (sampling_distribution takes the position for this);
// 12. final weights exp((logit - b) / temperature) over the kept tokens, b the largest processed
//     logit among them (temperature applied here in either order), renormalised.
// Arithmetic is fp64 throughout: no processed logit overflows, and this is the exact
// distribution against which an fp32 GPU sampler is measured.
SampleDistribution sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                                         std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                                         int64_t position = 0);

// One token drawn from sampling_distribution(): u = philox_uniform(seed, position, kSampleStream),
// then the inverse CDF over the admissible tokens in ascending id order (the first id whose
// cumulative probability exceeds u; rounding past the end gives the last admissible token with
// nonzero probability). Same inputs and position give the same token on every rank.
// temperature 0 returns the argmax and uses no randomness.
int32_t sample_ref(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt_ids,
                   std::span<const int32_t> output_ids, int64_t position);

// Per-token log-probabilities, from the log-softmax of the RAW logits (before bias, penalties,
// temperature or any filter): logprob = logit - m - log(sum exp(logit_i - m)), m the largest
// logit, in fp64 rounded to fp32 (-inf for a -inf logit).
struct TokenAlternative {
  int32_t id = 0;
  float logprob = 0.0f;
};
struct TokenLogprobs {
  float logprob = 0.0f;                // of the sampled token
  std::vector<TokenAlternative> top;   // min(n, vocab) best by raw logit, ties by lowest id
};
// Contract: logits [vocab] none NaN or +inf, at least one finite; token in [0, vocab); n >= 0.
TokenLogprobs token_logprobs_ref(std::span<const float> logits, int32_t token, int32_t n);

}  // namespace exl3
