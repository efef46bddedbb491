// Rejection-sampling verification of a draft model's proposal (contract in kernels/speculative.h).
#include <algorithm>

#include "kernels/check.h"
#include "kernels/philox.h"
#include "kernels/speculative.h"

namespace exl3 {

int32_t draw_from(std::span<const double> probs, double u) {
  EXL3_CHECK(!probs.empty(), "draw_from: empty distribution");
  double cumulative = 0.0;
  int32_t last_nonzero = -1;
  for (size_t id = 0; id < probs.size(); ++id) {
    if (probs[id] <= 0.0) continue;
    last_nonzero = static_cast<int32_t>(id);
    cumulative += probs[id];
    if (u < cumulative) return last_nonzero;
  }
  EXL3_CHECK(last_nonzero >= 0, "draw_from: distribution without mass");
  return last_nonzero;
}

VerifyResult verify_proposal(std::span<const int32_t> proposal, std::span<const std::vector<double>> draft_probs,
                             std::span<const std::vector<double>> target_probs, uint64_t seed,
                             int64_t first_position) {
  const size_t n = proposal.size();
  EXL3_CHECK(draft_probs.size() == n && target_probs.size() == n + 1, "verify_proposal: ", n, " proposals, ",
             draft_probs.size(), " draft and ", target_probs.size(), " target distributions");
  VerifyResult result;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<double>& q = draft_probs[i];
    const std::vector<double>& p = target_probs[i];
    EXL3_CHECK(q.size() == p.size(), "verify_proposal: vocabulary sizes differ at ", i);
    const int32_t x = proposal[i];
    EXL3_CHECK(x >= 0 && static_cast<size_t>(x) < q.size() && q[x] > 0.0, "verify_proposal: proposal ", x,
               " has no draft probability");
    const int64_t position = first_position + static_cast<int64_t>(i);
    const double u = philox_uniform(seed, static_cast<uint64_t>(position), kAcceptStream);
    if (u * q[x] < p[x]) {
      result.tokens.push_back(x);
      ++result.accepted;
      continue;
    }
    std::vector<double> residual(p.size());
    double mass = 0.0;
    for (size_t id = 0; id < p.size(); ++id) {
      residual[id] = std::max(0.0, p[id] - q[id]);
      mass += residual[id];
    }
    const double u_residual = philox_uniform(seed, static_cast<uint64_t>(position), kResidualStream);
    if (mass > 0.0) {
      for (double& r : residual) r /= mass;
      result.tokens.push_back(draw_from(residual, u_residual));
    } else {
      result.tokens.push_back(draw_from(p, u_residual));
    }
    return result;
  }
  const int64_t position = first_position + static_cast<int64_t>(n);
  result.tokens.push_back(draw_from(target_probs[n], philox_uniform(seed, static_cast<uint64_t>(position), kSampleStream)));
  return result;
}

}  // namespace exl3
