// Reference RMSNorm over the last dimension: x · rsqrt(mean(x²) + eps) · weight.
#include <cmath>

#include "kernels/ops.h"

namespace exl3 {

Tensor rms_norm_ref(const Tensor& x, const Tensor& weight, float eps) {
  const int64_t dim = weight.numel();
  EXL3_CHECK(dim > 0 && x.numel() % dim == 0, "rms_norm_ref: x ", shape_string(x.shape()), " vs weight ",
             shape_string(weight.shape()));
  Tensor y = Tensor::zeros(DType::kF32, x.shape());
  const float* in = x.data<float>();
  const float* w = weight.data<float>();
  float* out = y.mutable_data<float>();
  const int64_t rows = x.numel() / dim;
  for (int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(in[r * dim + i]) * in[r * dim + i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = in[r * dim + i] * scale * w[i];
  }
  return y;
}

}  // namespace exl3
