// Reference NEOX-style (rotate-half) rotary embedding, in place.
#include <cmath>

#include "kernels/ops.h"

namespace exl3 {

void rope_ref(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq,
              float attention_scaling) {
  EXL3_CHECK(x.rank() == 3, "rope_ref needs [tokens, heads, head_dim]");
  const int64_t tokens = x.dim(0), heads = x.dim(1), head_dim = x.dim(2);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  EXL3_CHECK(2 * half <= head_dim, "rotary dim ", 2 * half, " exceeds head_dim ", head_dim);
  EXL3_CHECK_EQ(static_cast<int64_t>(positions.size()), tokens, "one position per token");
  float* data = x.mutable_data<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // The angle is formed in fp32, as transformers does.
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling;
      const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = data + (t * heads + h) * head_dim;
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

}  // namespace exl3
