// CPU backend NEOX rotary embedding: the angle is formed in fp32 (as transformers does), cos/sin
// evaluated once per (token, frequency) and applied to every head.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void rope_cpu(float* x, const int32_t* positions, const float* inv_freq, int64_t tokens, int64_t heads,
              int64_t head_dim, int64_t half_rotary, float attention_scaling) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half_rotary; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling;
      const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * head_dim;
        const float x1 = v[i], x2 = v[i + half_rotary];
        v[i] = x1 * c - x2 * s;
        v[i + half_rotary] = x2 * c + x1 * s;
      }
    }
  }
}

}  // namespace exl3
