// Rotary inverse frequencies and attention scaling per RoPE type, with the semantics of Hugging
// Face transformers' initialisers (default, linear, llama3, yarn).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "worker/model/config.h"

namespace exl3 {
namespace {

std::vector<double> default_inv_freq(double base, int64_t dim) {
  std::vector<double> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / dim);
  return inv;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Dimension index at which a wavelength completes `rotations` turns over the original context.
double yarn_correction_dim(double rotations, int64_t dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
}

}  // namespace

RopeTables compute_rope(const ModelConfig& config) {
  const RopeConfig& rope = config.rope;
  const int64_t dim = config.rotary_dim();
  std::vector<double> inv = default_inv_freq(rope.theta, dim);
  double scaling = 1.0;
  switch (rope.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      for (double& f : inv) f /= rope.factor;
      break;
    case RopeType::kLlama3: {
      const double old_ctx = static_cast<double>(rope.original_max_position);
      const double low_wavelen = old_ctx / rope.low_freq_factor;
      const double high_wavelen = old_ctx / rope.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f = f / rope.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_ctx / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
          f = (1.0 - smooth) * f / rope.factor + smooth * f;
        }
      }
      break;
    }
    case RopeType::kYarn: {
      const double max_pos = static_cast<double>(rope.original_max_position > 0 ? rope.original_max_position
                                                                                : config.max_position_embeddings);
      if (rope.attention_factor) {
        scaling = *rope.attention_factor;
      } else if (rope.mscale && rope.mscale_all_dim) {
        scaling = yarn_mscale(rope.factor, *rope.mscale) / yarn_mscale(rope.factor, *rope.mscale_all_dim);
      } else {
        scaling = yarn_mscale(rope.factor, 1.0);
      }
      double low = yarn_correction_dim(rope.beta_fast, dim, rope.theta, max_pos);
      double high = yarn_correction_dim(rope.beta_slow, dim, rope.theta, max_pos);
      if (rope.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;  // avoid a zero-width ramp
      for (size_t i = 0; i < inv.size(); ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // share of the original frequency
        inv[i] = (inv[i] / rope.factor) * (1.0 - extrapolation) + inv[i] * extrapolation;
      }
      break;
    }
  }
  RopeTables t;
  t.inv_freq.assign(inv.begin(), inv.end());
  t.attention_scaling = static_cast<float>(scaling);
  return t;
}

}  // namespace exl3
