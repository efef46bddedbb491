// Perplexity over non-overlapping windows (ExLlamaV3 eval/ppl.py "eval_default" method): windows
// of L tokens start at 0, L, 2L, ... while start < n - L; each window is one forward from an
// empty cache; score = mean NLL of tokens 1..L-1 of every window given their in-window prefix.
#pragma once

#include <functional>
#include <span>

#include "worker/model/llama_model.h"

namespace exl3 {

struct PerplexityResult {
  double perplexity = 0.0;
  double mean_nll = 0.0;
  int64_t windows = 0;
  int64_t scored_tokens = 0;
};

// progress(window_done, windows_total, running_perplexity) after each window.
using PerplexityProgress = std::function<void(int64_t, int64_t, double)>;

absl::StatusOr<PerplexityResult> evaluate_perplexity(const LlamaModel& model, std::span<const int32_t> ids,
                                                     int64_t window, const PerplexityProgress& progress = nullptr);

}  // namespace exl3
