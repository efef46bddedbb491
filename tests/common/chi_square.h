// Chi-square goodness of fit for the sampler tests: Pearson's statistic and the critical values at
// p = 0.001 (the tests' significance level: with fixed seeds a pass is deterministic, and a true
// distribution fails one test in a thousand seeds).
#pragma once

#include <cstdint>
#include <vector>

namespace exl3::testing {

// Critical values of chi-square at p = 0.001 for 1..15 degrees of freedom (index df - 1).
inline constexpr double kChiSquare001[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
                                           27.877, 29.588, 31.264, 32.909, 34.528, 36.123, 37.697};

// Pearson's statistic of observed counts against expected probabilities over `n` draws.
inline double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double stat = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(n);
    stat += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return stat;
}

}  // namespace exl3::testing
