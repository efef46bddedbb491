// Greedy floor/ceil bit assignment (see mixed_bits.h).
#include "bench/mixed_bits.h"

#include <cmath>
#include <numeric>

#include "bench/tensor_fill.h"
#include "kernels/check.h"

namespace exl3 {

std::vector<int> assign_mixed_bits(const std::vector<uint64_t>& weights, double target_bpw, uint64_t seed) {
  EXL3_CHECK(target_bpw >= 1.0 && target_bpw <= 8.0, "bits per weight ", target_bpw, " outside [1, 8]");
  const int lo = static_cast<int>(std::floor(target_bpw));
  std::vector<int> bits(weights.size(), lo);
  if (lo == target_bpw) return bits;
  // Weights that must move from lo to lo + 1 to reach the target.
  const double total = static_cast<double>(std::accumulate(weights.begin(), weights.end(), uint64_t{0}));
  const double need = (target_bpw - lo) * total;
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), size_t{0});
  uint64_t state = seed ^ 0xB175ull;
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[splitmix64(state) % i]);
  double raised = 0.0;
  for (size_t i : order) {
    const double w = static_cast<double>(weights[i]);
    if (std::fabs(raised + w - need) < std::fabs(raised - need)) {
      bits[i] = lo + 1;
      raised += w;
    }
  }
  return bits;
}

double mean_bits(const std::vector<uint64_t>& weights, const std::vector<int>& bits) {
  EXL3_CHECK(weights.size() == bits.size(), "mean_bits: size mismatch");
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    num += static_cast<double>(weights[i]) * bits[i];
    den += static_cast<double>(weights[i]);
  }
  return den > 0 ? num / den : 0.0;
}

}  // namespace exl3
