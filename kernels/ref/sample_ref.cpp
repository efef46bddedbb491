// Reference sampler: bias and bans, penalties, DRY, temperature, top-k, top-p, min-p, typical-p,
// XTC and the inverse-CDF draw as plain loops over the vocabulary (the contract is in
// kernels/sampling.h); the raw-logit log-probabilities; the parameter validation.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

// Steps 1 to 4 of the contract. fp64 so that no finite logit overflows: |logit| <= 3.4e38 and a
// valid repetition penalty is >= 1.4e-45 (the smallest float), so |logit / penalty| <= 2.5e83.
std::vector<double> penalised_logits(std::span<const float> logits, const SamplingParams& params,
                                     std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  std::vector<double> out(logits.begin(), logits.end());
  for (double l : out) EXL3_CHECK(!std::isnan(l) && l != INFINITY, "logit ", l, " (NaN or +inf)");
  for (const TokenBias& b : params.logit_bias) {
    EXL3_CHECK(b.id >= 0 && b.id < vocab, "logit_bias id ", b.id);
    out[b.id] += static_cast<double>(b.bias);
  }
  for (int32_t id : params.banned_ids) {
    EXL3_CHECK(id >= 0 && id < vocab, "banned id ", id);
    out[id] = -INFINITY;
  }

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
  for (const DryPenalty& d : dry_penalties(params, prompt_ids, output_ids)) out[d.id] -= static_cast<double>(d.penalty);
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

// Step 10: locally typical sampling over the kept tokens.
void typical_filter(const std::vector<double>& weight, float typical_p, std::vector<uint8_t>& keep) {
  const int64_t vocab = static_cast<int64_t>(weight.size());
  const double total = kept_total(weight, keep);
  double entropy = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double p = weight[i] / total;
    if (keep[i] && p > 0.0) entropy -= p * std::log(p);
  }
  std::vector<double> score(vocab, INFINITY);
  std::vector<int32_t> order;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!keep[i]) continue;
    const double p = weight[i] / total;
    if (p > 0.0) score[i] = std::fabs(-std::log(p) - entropy);
    order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score[a] < score[b]; });
  double cumulative = 0.0;
  bool reached = false;
  for (int32_t id : order) {
    if (reached) {
      keep[id] = 0;
      continue;
    }
    cumulative += weight[id] / total;
    reached = cumulative >= static_cast<double>(typical_p);
  }
}

// Step 11 once the draw said cut: of the kept tokens with p >= threshold, all but the lowest-ranked.
void xtc_filter(const std::vector<double>& weight, const std::vector<int32_t>& ranked, float threshold,
                std::vector<uint8_t>& keep) {
  const double total = kept_total(weight, keep);
  std::vector<int32_t> above;  // in rank order
  for (int32_t id : ranked) {
    if (keep[id] && weight[id] / total >= static_cast<double>(threshold)) above.push_back(id);
  }
  if (above.size() < 2) return;
  for (size_t i = 0; i + 1 < above.size(); ++i) keep[above[i]] = 0;
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
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const TokenBias& b = p.logit_bias[i];
    if (b.id < 0 || b.id >= vocab_size || (i > 0 && b.id <= p.logit_bias[i - 1].id)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias ids must be in [0, ", vocab_size,
                                                     ") and strictly increasing, got ", b.id, " at ", i));
    }
    if (!(b.bias >= -100.0f && b.bias <= 100.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias of token ", b.id, " must be in [-100, 100], got ", b.bias));
    }
  }
  for (size_t i = 0; i < p.banned_ids.size(); ++i) {
    const int32_t id = p.banned_ids[i];
    if (id < 0 || id >= vocab_size || (i > 0 && id <= p.banned_ids[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("banned_ids must be in [0, ", vocab_size,
                                                     ") and strictly increasing, got ", id, " at ", i));
    }
  }
  if (static_cast<int64_t>(p.banned_ids.size()) >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("banned_ids bans all ", vocab_size, " tokens; at least one must stay allowed"));
  }
  if (!(p.dry_multiplier >= 0.0f && p.dry_multiplier <= 100.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dry_multiplier must be in [0, 100] (0 = off), got ", p.dry_multiplier));
  }
  if (!(p.dry_base >= 1.0f && p.dry_base <= 10.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("dry_base must be in [1, 10], got ", p.dry_base));
  }
  if (p.dry_allowed_length < 1 || p.dry_allowed_length > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("dry_allowed_length must be in [1, 1000], got ", p.dry_allowed_length));
  }
  if (p.dry_range < 0) {
    return absl::InvalidArgumentError(absl::StrCat("dry_range must be >= 0 (0 = whole history), got ", p.dry_range));
  }
  for (size_t i = 0; i < p.dry_breakers.size(); ++i) {
    const int32_t id = p.dry_breakers[i];
    if (id < 0 || id >= vocab_size || (i > 0 && id <= p.dry_breakers[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("dry_breakers must be in [0, ", vocab_size,
                                                     ") and strictly increasing, got ", id, " at ", i));
    }
  }
  if (!(p.typical_p > 0.0f && p.typical_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("typical_p must be in (0, 1] (1 = off), got ", p.typical_p));
  }
  if (!(p.xtc_threshold > 0.0f && p.xtc_threshold <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("xtc_threshold must be in (0, 1], got ", p.xtc_threshold));
  }
  if (!(p.xtc_probability >= 0.0f && p.xtc_probability <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("xtc_probability must be in [0, 1] (0 = off), got ", p.xtc_probability));
  }
  if (p.logprobs < 0 || p.logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, ", kMaxLogprobs, "] (0 = off), got ", p.logprobs));
  }
  return absl::OkStatus();
}

SampleDistribution sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                                         std::span<const int32_t> prompt_ids, std::span<const int32_t> output_ids,
                                         int64_t position) {
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

  // Filter weights (step 6), max-subtracted: the best token has weight exactly 1.
  const double filter_temperature = params.temperature_last ? 1.0 : static_cast<double>(params.temperature);
  std::vector<double> weight(vocab);
  for (int64_t i = 0; i < vocab; ++i) weight[i] = std::exp((penalised[i] - penalised[best]) / filter_temperature);
  std::vector<int32_t> ranked(vocab);
  std::iota(ranked.begin(), ranked.end(), 0);
  std::sort(ranked.begin(), ranked.end(), [&](int32_t a, int32_t b) {
    return penalised[a] > penalised[b] || (penalised[a] == penalised[b] && a < b);
  });

  std::vector<uint8_t> keep(vocab, 1);
  for (int32_t id : params.banned_ids) keep[id] = 0;
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
  if (params.typical_p < 1.0f) typical_filter(weight, params.typical_p, keep);
  if (params.xtc_probability > 0.0f &&
      philox_uniform(params.seed, static_cast<uint64_t>(position), kXtcStream) < params.xtc_probability) {
    xtc_filter(weight, ranked, params.xtc_threshold, keep);
  }

  // Step 12: the final weights, relative to the best kept token (the first kept in rank order).
  int32_t kept_best = -1;
  for (int32_t id : ranked) {
    if (keep[id]) {
      kept_best = id;
      break;
    }
  }
  EXL3_CHECK(kept_best >= 0, "no token kept");
  for (int64_t i = 0; i < vocab; ++i) {
    weight[i] = keep[i] ? std::exp((penalised[i] - penalised[kept_best]) / static_cast<double>(params.temperature)) : 0.0;
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
  const SampleDistribution dist = sampling_distribution(logits, params, prompt_ids, output_ids, position);
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


TokenLogprobs token_logprobs_ref(std::span<const float> logits, int32_t token, int32_t n) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  EXL3_CHECK(vocab > 0 && token >= 0 && token < vocab && n >= 0, "vocab ", vocab, " token ", token, " n ", n);
  double max_logit = -INFINITY;
  for (float l : logits) {
    EXL3_CHECK(!std::isnan(l) && l != INFINITY, "logit ", l, " (NaN or +inf)");
    max_logit = std::max(max_logit, static_cast<double>(l));
  }
  EXL3_CHECK(std::isfinite(max_logit), "every logit is -inf");
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_norm = max_logit + std::log(sum);
  const auto logprob = [&](int64_t i) { return static_cast<float>(static_cast<double>(logits[i]) - log_norm); };
  TokenLogprobs out;
  out.logprob = logprob(token);
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t count = std::min<int64_t>(n, vocab);
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int64_t k = 0; k < count; ++k) out.top.push_back({ids[k], logprob(ids[k])});
  return out;
}

}  // namespace exl3
