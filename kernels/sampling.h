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

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, no randomness)
  int32_t top_k = 0;                // 0 = off; k >= vocab size keeps every token
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off
  float presence_penalty = 0.0f;    // 0 = off
  float frequency_penalty = 0.0f;   // 0 = off
  uint64_t seed = 0;
};

// Philox stream of the token draw; other streams are free for other per-position randomness.
inline constexpr uint64_t kSampleStream = 0;

// INVALID_ARGUMENT naming the field and its allowed range unless: temperature finite and >= 0,
// top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, repetition_penalty finite and > 0,
// presence_penalty and frequency_penalty in [-2, 2]. vocab_size > 0 (a caller invariant).
absl::Status validate_sampling_params(const SamplingParams& params, int32_t vocab_size);

// The distribution a draw is taken from, over the whole vocabulary.
struct SampleDistribution {
  std::vector<double> probs;        // [vocab]: sums to 1 over the admissible tokens, 0 elsewhere
  std::vector<uint8_t> admissible;  // [vocab]: 1 where the token survived every filter
};

// Contract (params validated; logits [vocab] fp32, none NaN or +inf, at least one finite; every
// id in prompt_ids/output_ids in [0, vocab)). In order:
//  1. repetition penalty (HF): for each distinct id in prompt_ids ∪ output_ids,
//     logit > 0 ? logit / penalty : logit * penalty;
//  2. presence/frequency penalties (OpenAI), over output_ids only:
//     logit -= presence · [count > 0] + frequency · count;
//  3. temperature 0: the one admissible token is the argmax of the penalised logits (ties: lowest
//     id) and steps 4-7 are skipped. Otherwise probabilities are softmax(logit / temperature);
// Ranking for steps 4-6: penalised logit descending, ties by lowest id first.
//  4. top-k: keep the k best-ranked tokens;
//  5. top-p: over the kept tokens renormalised, keep the shortest best-ranked prefix whose
//     cumulative probability is >= top_p (at least one token; top_p = 1 keeps all);
//  6. min-p: over the kept tokens renormalised, keep those with prob >= min_p · max prob;
//  7. renormalise over the kept (admissible) tokens.
// All arithmetic after reading the fp32 logits is fp64: no penalised logit overflows, and this is
// the exact distribution against which an fp32 GPU sampler is measured.
SampleDistribution sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                                         std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids);

// One token drawn from sampling_distribution(): u = philox_uniform(seed, position, kSampleStream),
// then the inverse CDF over the admissible tokens in ascending id order (the first id whose
// cumulative probability exceeds u; rounding past the end gives the last admissible token with
// nonzero probability). Same inputs and position give the same token on every rank.
// temperature 0 returns the argmax and uses no randomness.
int32_t sample_ref(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt_ids,
                   std::span<const int32_t> output_ids, int64_t position);

}  // namespace exl3
