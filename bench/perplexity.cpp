// Windowed perplexity evaluation.
#include "bench/perplexity.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {

absl::StatusOr<PerplexityResult> evaluate_perplexity(const LlamaModel& model, std::span<const int32_t> ids,
                                                     int64_t window, const PerplexityProgress& progress) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t vocab = model.config().vocab_size;
  if (window < 2) return absl::InvalidArgumentError(absl::StrCat("--window must be >= 2 (got ", window, ")"));
  if (window > model.config().max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--window ", window, " exceeds the model's context of ",
                                                   model.config().max_position_embeddings));
  }
  if (n <= window) {
    return absl::InvalidArgumentError(absl::StrCat("need more than ", window, " tokens for one window, got ", n));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at index ", i, " outside the vocabulary [0, ",
                                                     vocab, ")"));
    }
  }
  const int64_t windows = (n - window + window - 1) / window;  // starts 0, L, ... < n - L
  PerplexityResult r;
  double nll_sum = 0.0;
  SequenceForwardOptions options;
  options.chunk_size = window;
  options.page_size = 256;
  for (int64_t w = 0; w < windows; ++w) {
    const std::span<const int32_t> win = ids.subspan(w * window, window);
    const Tensor logits = forward_sequence(model, win, options);
    for (int64_t t = 0; t + 1 < window; ++t) {
      const float* row = logits.data<float>() + t * vocab;
      const double max = *std::max_element(row, row + vocab);
      double sum = 0.0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
      nll_sum += std::log(sum) + max - row[win[t + 1]];
      ++r.scored_tokens;
    }
    ++r.windows;
    if (progress) progress(r.windows, windows, std::exp(nll_sum / r.scored_tokens));
  }
  r.mean_nll = nll_sum / r.scored_tokens;
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace exl3
