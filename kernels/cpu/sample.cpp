// CPU backend token sampler: the draw of sample_ref (kernels/sampling.h) over the distribution
// sampling_distribution() defines, in fp64, one logits row at a time.
#include "kernels/check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/philox.h"
#include "kernels/sampling.h"

namespace exl3 {

int32_t sample_cpu(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt_ids,
                   std::span<const int32_t> output_ids, int64_t position) {
  EXL3_CHECK(position >= 0, "sample position ", position);
  const SampleDistribution dist = sampling_distribution(logits, params, prompt_ids, output_ids, position);
  const int32_t vocab = static_cast<int32_t>(dist.probs.size());
  // Greedy: the one admissible token, no randomness.
  if (params.temperature == 0.0f) {
    for (int32_t id = 0; id < vocab; ++id) {
      if (dist.admissible[id] != 0) return id;
    }
  }
  // Inverse CDF in ascending id order; rounding past the end gives the last token drawn from.
  const double u = philox_uniform(params.seed, static_cast<uint64_t>(position), kSampleStream);
  double cumulative = 0.0;
  int32_t last = -1;
  for (int32_t id = 0; id < vocab; ++id) {
    if (dist.admissible[id] == 0 || dist.probs[id] == 0.0) continue;
    cumulative += dist.probs[id];
    last = id;
    if (u < cumulative) return id;
  }
  EXL3_CHECK(last >= 0, "no admissible token with nonzero probability");
  return last;
}

}  // namespace exl3
