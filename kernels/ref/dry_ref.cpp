// DRY ("don't repeat yourself") penalties of the sampler (contract in kernels/sampling.h): for each
// token, the longest repeat of the history's tail that the token would extend, in one linear pass.
#include <algorithm>
#include <cmath>

#include "kernels/check.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

// z[k] = length of the longest common prefix of s and s[k..] (z[0] = |s|); the Z-function in O(|s|).
std::vector<int64_t> z_function(const std::vector<int32_t>& s) {
  const int64_t n = static_cast<int64_t>(s.size());
  std::vector<int64_t> z(n, 0);
  if (n == 0) return z;
  z[0] = n;
  int64_t left = 0, right = 0;  // [left, right): the rightmost match found so far
  for (int64_t k = 1; k < n; ++k) {
    if (k < right) z[k] = std::min(right - k, z[k - left]);
    while (k + z[k] < n && s[z[k]] == s[k + z[k]]) ++z[k];
    if (k + z[k] > right) {
      left = k;
      right = k + z[k];
    }
  }
  return z;
}

}  // namespace

std::vector<DryPenalty> dry_penalties(const SamplingParams& params, std::span<const int32_t> prompt_ids,
                                      std::span<const int32_t> output_ids) {
  std::vector<DryPenalty> out;
  if (params.dry_multiplier == 0.0f) return out;
  EXL3_CHECK(params.dry_allowed_length >= 1, "dry_allowed_length ", params.dry_allowed_length);
  const int64_t total = static_cast<int64_t>(prompt_ids.size() + output_ids.size());
  const int64_t length = params.dry_range > 0 ? std::min<int64_t>(params.dry_range, total) : total;
  if (length < 2) return out;
  // The window, reversed: reversed[k] = h[L - 1 - k].
  std::vector<int32_t> reversed(length);
  for (int64_t k = 0; k < length; ++k) {
    const int64_t index = total - 1 - k;  // index into prompt ++ output
    const size_t prompt_size = prompt_ids.size();
    reversed[k] = index < static_cast<int64_t>(prompt_size) ? prompt_ids[index] : output_ids[index - prompt_size];
  }
  const auto is_breaker = [&](int32_t id) {
    return std::binary_search(params.dry_breakers.begin(), params.dry_breakers.end(), id);
  };
  // The longest tail of the history free of breakers: no match can be longer.
  int64_t free_tail = 0;
  while (free_tail < length && !is_breaker(reversed[free_tail])) ++free_tail;
  if (free_tail < params.dry_allowed_length) return out;

  // For an occurrence at j (0 <= j < L), h[j - n, j) = h[L - n, L) reads, reversed, as a common
  // prefix of `reversed` and reversed[L - j..]: n(j) = min(z[L - j], free_tail), and z[L - j] <= j.
  const std::vector<int64_t> z = z_function(reversed);
  std::vector<std::pair<int32_t, int64_t>> longest;  // (candidate, n) for every usable occurrence
  for (int64_t j = 1; j < length; ++j) {
    const int64_t n = std::min(z[length - j], free_tail);
    if (n >= params.dry_allowed_length) longest.push_back({reversed[length - 1 - j], n});
  }
  std::sort(longest.begin(), longest.end());
  for (size_t i = 0; i < longest.size(); ++i) {
    if (i + 1 < longest.size() && longest[i + 1].first == longest[i].first) continue;  // keep the largest n
    const double exponent = static_cast<double>(longest[i].second - params.dry_allowed_length);
    const double penalty = std::min(static_cast<double>(params.dry_multiplier) *
                                        std::pow(static_cast<double>(params.dry_base), exponent),
                                    kMaxDryPenalty);
    out.push_back({longest[i].first, static_cast<float>(penalty)});
  }
  return out;
}

}  // namespace exl3
