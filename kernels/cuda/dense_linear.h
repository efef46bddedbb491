// Dense linear on the GPU through cuBLAS: y = x · Wᵀ (+ bias) with W kept F16 in the HF layout
// [out_features, in_features], fp16 inputs, fp32 accumulation, one rounding to the output dtype.
// The CUDA backend's path for the linears a checkpoint stores unquantized (e.g. an fp16 head).
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/check.h"

// Aborts with the cuBLAS status string when a cuBLAS call fails (a broken invariant: bad handle,
// unsupported configuration), as EXL3_CUDA_CHECK does for the runtime.
#define EXL3_CUBLAS_CHECK(expr)                                                                              \
  do {                                                                                                       \
    const cublasStatus_t exl3_cublas_status_ = (expr);                                                       \
    if (exl3_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                         \
      ::exl3::internal::check_failed(#expr, __FILE__, __LINE__, cublasGetStatusString(exl3_cublas_status_)); \
    }                                                                                                        \
  } while (0)

namespace exl3 {

// x F16 [m, in_features]; w F16 [out_features, in_features]; bias F32 [out_features] or null;
// y [m, out_features], F32 (y_f32) or F16. With a bias and an F16 output the fp32 product goes
// through scratch_c (F32, at least m · out_features floats) so that the sum is rounded once.
struct DenseLinearParams {
  const __half* x = nullptr;
  const __half* w = nullptr;
  const float* bias = nullptr;
  void* y = nullptr;
  bool y_f32 = false;
  int64_t m = 0, in_features = 0, out_features = 0;
  float* scratch_c = nullptr;
};

// Contract (EXL3_CHECK at entry): m in 0..INT32_MAX (0 launches nothing); in_features and
// out_features in 1..INT32_MAX (cuBLAS takes int sizes); x, w, y non-null device pointers,
// scratch_c too when bias && !y_f32; `handle` already bound to `stream` (the backend binds it once:
// cublasSetStream also resets the workspace given by cublasSetWorkspace). Asynchronous on `stream`.
void launch_dense_linear(const DenseLinearParams& p, cublasHandle_t handle, cudaStream_t stream);

// y[r, j] = c[r, j] + bias[j] over [rows, cols], rounded once to y's dtype (F32 when y_f32, else
// F16); c (F32) may alias y when y_f32. The bias epilogue of every cuBLAS linear whose product lands
// in fp32 first. Asynchronous on `stream`.
void launch_bias_epilogue(const float* c, const float* bias, void* y, bool y_f32, int64_t rows, int64_t cols,
                          cudaStream_t stream);

}  // namespace exl3
