// Reference softmax over the last dimension, in place, max-subtracted.
#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace exl3 {

void softmax_ref(float* data, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* x = data + r * cols;
    const float max = *std::max_element(x, x + cols);
    double sum = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
      x[i] = std::exp(x[i] - max);
      sum += x[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < cols; ++i) x[i] *= inv;
  }
}

}  // namespace exl3
