// Windowed perplexity evaluation, with an optional quantized KV cache compared to a full one.
#include "bench/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

// One window's logits F32 [window, vocab] through `cache` (emptied first), `chunk` tokens per forward.
Tensor window_logits(const LlamaModel& model, KvCache& cache, std::span<const int32_t> win, int64_t chunk) {
  const int64_t n = static_cast<int64_t>(win.size()), vocab = model.config().vocab_size;
  PageTable table;
  EXL3_CHECK_OK(cache.reserve(table, n));
  Tensor logits = Tensor::zeros(DType::kF32, {n, vocab});
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t len = std::min(chunk, n - start);
    const Tensor out =
        model.forward(win.subspan(start, len), static_cast<int32_t>(start), cache, table, LogitsMode::kAll);
    std::copy_n(out.data<float>(), len * vocab, logits.mutable_data<float>() + start * vocab);
  }
  cache.release(table);
  return logits;
}

// Sum of -log p(win[t + 1]) over t = 0 .. window - 2.
double window_nll(const Tensor& logits, std::span<const int32_t> win) {
  const int64_t vocab = logits.dim(1);
  double nll = 0.0;
  for (size_t t = 0; t + 1 < win.size(); ++t) {
    const float* row = logits.data<float>() + static_cast<int64_t>(t) * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
    nll += std::log(sum) + max - row[win[t + 1]];
  }
  return nll;
}

absl::StatusOr<std::unique_ptr<KvCache>> make_cache(const LlamaModel& model, int64_t window, const KvCacheBits& bits) {
  const int64_t page_size = 256;
  return KvCache::create(model.cache_shape((window + page_size - 1) / page_size, page_size, bits), model.backend());
}

}  // namespace

absl::StatusOr<PerplexityResult> evaluate_perplexity(const LlamaModel& model, std::span<const int32_t> ids,
                                                     const PerplexityOptions& o, const PerplexityProgress& progress) {
  const int64_t n = static_cast<int64_t>(ids.size()), window = o.window;
  const int64_t vocab = model.config().vocab_size;
  if (window < 2) return absl::InvalidArgumentError(absl::StrCat("--window must be >= 2 (got ", window, ")"));
  if (window > model.config().max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("--window ", window, " exceeds the model's context of ", model.config().max_position_embeddings));
  }
  if (n <= window) {
    return absl::InvalidArgumentError(absl::StrCat("need more than ", window, " tokens for one window, got ", n));
  }
  if (o.chunk < 0 || o.max_windows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunk (", o.chunk, ") and --max-windows (", o.max_windows, ") must not be negative"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at index ", i, " outside the vocabulary [0, ", vocab, ")"));
    }
  }
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, make_cache(model, window, o.cache_bits));
  // The reference cache is only needed when it differs from the evaluated one.
  std::unique_ptr<KvCache> full;
  if (o.kl_vs_full && o.cache_bits.quantized()) {
    EXL3_ASSIGN_OR_RETURN(full, make_cache(model, window, KvCacheBits{}));
  }
  const int64_t chunk = o.chunk > 0 ? std::min(o.chunk, window) : window;
  int64_t windows = (n - window + window - 1) / window;  // starts 0, L, ... < n - L
  if (o.max_windows > 0) windows = std::min(windows, o.max_windows);
  PerplexityResult r;
  double nll_sum = 0.0, full_nll_sum = 0.0, kl_sum = 0.0, top1_sum = 0.0;
  for (int64_t w = 0; w < windows; ++w) {
    const std::span<const int32_t> win = ids.subspan(w * window, window);
    const Tensor logits = window_logits(model, *cache, win, chunk);
    nll_sum += window_nll(logits, win);
    r.scored_tokens += window - 1;
    if (o.kl_vs_full) {
      if (full) {
        const Tensor reference = window_logits(model, *full, win, chunk);
        full_nll_sum += window_nll(reference, win);
        const LogitsComparison c = compare_logits(reference.rows(0, window - 1), logits.rows(0, window - 1));
        kl_sum += c.mean_kl * static_cast<double>(window - 1);
        top1_sum += c.top1_agreement * static_cast<double>(window - 1);
        r.max_kl = std::max(r.max_kl, c.max_kl);
      } else {
        top1_sum += static_cast<double>(window - 1);  // the reference is this run itself
      }
    }
    ++r.windows;
    if (progress) progress(r.windows, windows, std::exp(nll_sum / r.scored_tokens));
  }
  r.mean_nll = nll_sum / r.scored_tokens;
  r.perplexity = std::exp(r.mean_nll);
  if (o.kl_vs_full) {
    r.full_perplexity = full ? std::exp(full_nll_sum / r.scored_tokens) : r.perplexity;
    r.mean_kl = kl_sum / r.scored_tokens;
    r.top1_agreement = top1_sum / r.scored_tokens;
  }
  return r;
}

absl::StatusOr<PerplexityResult> evaluate_perplexity(const LlamaModel& model, std::span<const int32_t> ids,
                                                     int64_t window, const PerplexityProgress& progress) {
  PerplexityOptions o;
  o.window = window;
  return evaluate_perplexity(model, ids, o, progress);
}

}  // namespace exl3
