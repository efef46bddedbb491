// Logits from probabilities, and the sampler tests' check of sampling_distribution (kernels/sampling.h) against hand-derived
// probabilities: each within 1e-6, and exactly the tokens with a positive expected probability
// admissible.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/sampling.h"

namespace exl3::testing {

constexpr double kDistributionTolerance = 1e-6;

// Logits whose softmax is p (to fp32 rounding of the logs).
inline std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

inline void expect_distribution(const std::vector<float>& logits, const SamplingParams& params,
                                const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                const std::vector<double>& expected, const std::string& what, int64_t position = 0) {
  SCOPED_TRACE(what);
  const absl::Status valid = validate_sampling_params(params, static_cast<int32_t>(logits.size()));
  ASSERT_TRUE(valid.ok()) << valid;
  const SampleDistribution d = sampling_distribution(logits, params, prompt, output, position);
  ASSERT_EQ(d.probs.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(d.probs[i], expected[i], kDistributionTolerance) << "token " << i;
    EXPECT_EQ(d.admissible[i] != 0, expected[i] > 0.0) << "token " << i;
  }
}

inline void expect_distribution(const std::vector<float>& logits, const SamplingParams& params,
                                const std::vector<double>& expected, const std::string& what) {
  expect_distribution(logits, params, {}, {}, expected, what);
}

}  // namespace exl3::testing
