// Perplexity over non-overlapping windows (ExLlamaV3 eval/ppl.py "eval_default" method): windows
// of L tokens start at 0, L, 2L, ... while start < n - L; each window runs from an empty KV cache;
// score = mean NLL of tokens 1..L-1 of every window given their in-window prefix.
//
// The cache may be quantized (PerplexityOptions::cache_bits, exl3-format.md §9). Every forward
// writes its tokens' K/V into the cache before attention, and attention reads keys and values only
// from the cache (Backend::attention), so with a quantized cache every query, even inside a single
// whole-window prefill, attends to quantized-then-dequantized keys and values, its own included.
// With kl_vs_full the same windows also run through a full-precision cache, and the quantized
// cache's logits are compared with those (mean KL(full || quantized) over the scored positions).
#pragma once

#include <functional>
#include <span>

#include "worker/kv_cache_bits.h"
#include "worker/model/llama_model.h"

namespace exl3 {

struct PerplexityOptions {
  int64_t window = 256;
  KvCacheBits cache_bits{};  // widths of the cache the windows run through
  bool kl_vs_full = false;   // also run a full-precision (16,16) cache and compare logits
  int64_t chunk = 0;         // tokens per forward inside a window (0 = the whole window at once)
  int64_t max_windows = 0;   // evaluate only the first N windows (0 = all)
};

struct PerplexityResult {
  double perplexity = 0.0;
  double mean_nll = 0.0;
  int64_t windows = 0;
  int64_t scored_tokens = 0;
  // With kl_vs_full: the full-precision cache's perplexity over the same windows, and the
  // quantized cache's logits against it: mean and max over scored positions of KL(full || ours),
  // and the fraction of positions whose argmax agrees.
  double full_perplexity = 0.0;
  double mean_kl = 0.0;
  double max_kl = 0.0;
  double top1_agreement = 0.0;
};

// progress(window_done, windows_total, running_perplexity) after each window.
using PerplexityProgress = std::function<void(int64_t, int64_t, double)>;

absl::StatusOr<PerplexityResult> evaluate_perplexity(const LlamaModel& model, std::span<const int32_t> ids,
                                                     const PerplexityOptions& options,
                                                     const PerplexityProgress& progress = nullptr);
// A full-precision cache, whole windows.
absl::StatusOr<PerplexityResult> evaluate_perplexity(const LlamaModel& model, std::span<const int32_t> ids,
                                                     int64_t window, const PerplexityProgress& progress = nullptr);

}  // namespace exl3
