// CPU backend matrix product through BLAS (OpenBLAS sgemm); checked against matmul_ref.
#include <cblas.h>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void matmul_cpu(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, x, static_cast<int>(k), w, static_cast<int>(n), 0.0f, y, static_cast<int>(n));
}

}  // namespace exl3
