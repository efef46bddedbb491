// CPU backend RMSNorm over rows: the sum of squares in double, the scaling in fp32.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void rms_norm_cpu(const float* x, const float* weight, float* out, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * dim;
    float* o = out + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(in[i]) * in[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) o[i] = in[i] * scale * weight[i];
  }
}

}  // namespace exl3
