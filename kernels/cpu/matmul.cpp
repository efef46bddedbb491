// CPU backend matrix product through BLAS (OpenBLAS sgemm); checked against matmul_ref.
#include <cblas.h>

#include "kernels/ops.h"

namespace exl3 {

Tensor matmul(const Tensor& x, const Tensor& w) {
  EXL3_CHECK(x.rank() == 2 && w.rank() == 2, "matmul needs 2-D operands");
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(1);
  EXL3_CHECK_EQ(w.dim(0), k, "inner dimensions");
  Tensor y = Tensor::zeros(DType::kF32, {m, n});
  if (m == 0 || n == 0 || k == 0) return y;  // an empty product is all zeros
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x.data<float>(), static_cast<int>(k), w.data<float>(),
              static_cast<int>(n), 0.0f, y.mutable_data<float>(), static_cast<int>(n));
  return y;
}

}  // namespace exl3
