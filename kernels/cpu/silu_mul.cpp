// CPU backend SiLU(gate) · up.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void silu_mul_cpu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace exl3
