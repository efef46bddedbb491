// CPU backend elementwise residual add.
#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void add_cpu(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace exl3
