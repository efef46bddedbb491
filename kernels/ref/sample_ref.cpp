// Reference sampler: penalties, temperature, top-k, top-p, min-p and the inverse-CDF draw as plain
// loops over the vocabulary (the contract is in kernels/sampling.h). Also the parameter validation.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

// Steps 1 and 2 of the contract. fp64 so that no finite logit overflows: |logit| <= 3.4e38 and a
// valid repetition penalty is >= 1.4e-45 (the smallest float), so |logit / penalty| <= 2.5e83.
std::vector<double> penalised_logits(std::span<const float> logits, const SamplingParams& params,
                                     std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  std::vector<double> out(logits.begin(), logits.end());
  for (double l : out) EXL3_CHECK(!std::isnan(l) && l != INFINITY, "logit ", l, " (NaN or +inf)");

  std::vector<uint8_t> seen(vocab, 0);
  std::vector<int64_t> output_count(vocab, 0);
  for (int32_t id : prompt_ids) {
    EXL3_CHECK(id >= 0 && id < vocab, "prompt token ", id, " outside the vocabulary of ", vocab);
    seen[id] = 1;
  }
  for (int32_t id : output_ids) {
    EXL3_CHECK(id >= 0 && id < vocab, "output token ", id, " outside the vocabulary of ", vocab);
    seen[id] = 1;
    ++output_count[id];
  }

  const double repetition = params.repetition_penalty;
  for (int64_t i = 0; i < vocab; ++i) {
    if (seen[i]) out[i] = out[i] > 0 ? out[i] / repetition : out[i] * repetition;
  }
  for (int64_t i = 0; i < vocab; ++i) {
    if (output_count[i] > 0) {
      out[i] -= static_cast<double>(params.presence_penalty) +
                static_cast<double>(params.frequency_penalty) * static_cast<double>(output_count[i]);
    }
  }
  return out;
}

// Lowest id among the largest values.
int32_t argmax_lowest_id(const std::vector<double>& values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

double kept_total(const std::vector<double>& weight, const std::vector<uint8_t>& keep) {
  double total = 0.0;
  for (size_t i = 0; i < weight.size(); ++i) {
    if (keep[i]) total += weight[i];
  }
  return total;
}

}  // namespace

absl::Status validate_sampling_params(const SamplingParams& p, int32_t vocab_size) {
  EXL3_CHECK(vocab_size > 0, "vocab_size ", vocab_size);
  // Every comparison is written so that NaN fails it.
  if (!(std::isfinite(p.temperature) && p.temperature >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0 (0 = greedy), got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0 (0 = off), got ", p.top_k));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1] (1 = off), got ", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p must be in [0, 1] (0 = off), got ", p.min_p));
  }
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be finite and > 0 (1 = off), got ", p.repetition_penalty));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty must be in [-2, 2] (0 = off), got ", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty must be in [-2, 2] (0 = off), got ", p.frequency_penalty));
  }
  return absl::OkStatus();
}

SampleDistribution sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                                         std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  EXL3_CHECK(vocab > 0, "empty logits");
  const std::vector<double> penalised = penalised_logits(logits, params, prompt_ids, output_ids);
  const int32_t best = argmax_lowest_id(penalised);
  EXL3_CHECK(std::isfinite(penalised[best]), "every logit is -inf");

  SampleDistribution dist;
  dist.probs.assign(vocab, 0.0);
  dist.admissible.assign(vocab, 0);
  if (params.temperature == 0.0f) {
    dist.probs[best] = 1.0;
    dist.admissible[best] = 1;
    return dist;
  }

  // Unnormalised probabilities, max-subtracted: the best token has weight exactly 1.
  std::vector<double> weight(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    weight[i] = std::exp((penalised[i] - penalised[best]) / static_cast<double>(params.temperature));
  }
  std::vector<int32_t> ranked(vocab);
  std::iota(ranked.begin(), ranked.end(), 0);
  std::sort(ranked.begin(), ranked.end(), [&](int32_t a, int32_t b) {
    return penalised[a] > penalised[b] || (penalised[a] == penalised[b] && a < b);
  });

  std::vector<uint8_t> keep(vocab, 1);
  if (params.top_k > 0) {
    for (int64_t r = params.top_k; r < vocab; ++r) keep[ranked[r]] = 0;
  }
  if (params.top_p < 1.0f) {
    const double total = kept_total(weight, keep);
    double cumulative = 0.0;
    bool reached = false;
    for (int32_t id : ranked) {
      if (!keep[id]) continue;
      if (reached) {
        keep[id] = 0;
        continue;
      }
      cumulative += weight[id] / total;
      reached = cumulative >= static_cast<double>(params.top_p);
    }
  }
  if (params.min_p > 0.0f) {
    // ranked[0] survives top-k (k >= 1) and top-p (at least one token), so it is the max here.
    const double total = kept_total(weight, keep);
    const double threshold = static_cast<double>(params.min_p) * (weight[ranked[0]] / total);
    for (int64_t i = 0; i < vocab; ++i) {
      if (keep[i] && weight[i] / total < threshold) keep[i] = 0;
    }
  }

  const double total = kept_total(weight, keep);
  for (int64_t i = 0; i < vocab; ++i) {
    if (keep[i]) {
      dist.admissible[i] = 1;
      dist.probs[i] = weight[i] / total;
    }
  }
  return dist;
}

int32_t sample_ref(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt_ids,
                   std::span<const int32_t> output_ids, int64_t position) {
  EXL3_CHECK(position >= 0, "position ", position);
  const SampleDistribution dist = sampling_distribution(logits, params, prompt_ids, output_ids);
  const int32_t vocab = static_cast<int32_t>(dist.probs.size());
  if (params.temperature == 0.0f) {
    for (int32_t id = 0; id < vocab; ++id) {
      if (dist.admissible[id]) return id;
    }
  }
  const double u = philox_uniform(params.seed, static_cast<uint64_t>(position), kSampleStream);
  double cumulative = 0.0;
  int32_t last = -1;
  for (int32_t id = 0; id < vocab; ++id) {
    if (!dist.admissible[id] || dist.probs[id] == 0.0) continue;
    cumulative += dist.probs[id];
    last = id;
    if (u < cumulative) return id;
  }
  EXL3_CHECK(last >= 0, "no admissible token with nonzero probability");
  return last;
}

}  // namespace exl3
