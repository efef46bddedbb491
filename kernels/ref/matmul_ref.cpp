// Reference matrix product: y[m, n] = x[m, k] · w[k, n], fp32 with a double accumulator.
#include "kernels/ops.h"

namespace exl3 {

Tensor matmul_ref(const Tensor& x, const Tensor& w) {
  EXL3_CHECK(x.rank() == 2 && w.rank() == 2, "matmul_ref needs 2-D operands");
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(1);
  EXL3_CHECK_EQ(w.dim(0), k, "inner dimensions");
  Tensor y = Tensor::zeros(DType::kF32, {m, n});
  const float* a = x.data<float>();
  const float* b = w.data<float>();
  float* c = y.mutable_data<float>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(a[i * k + p]) * b[p * n + j];
      c[i * n + j] = static_cast<float>(acc);
    }
  }
  return y;
}

}  // namespace exl3
