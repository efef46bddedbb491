// CHECK macros for CUDA runtime errors: print the call, the CUDA error string, file and line.
#pragma once

#include <cuda_runtime.h>

#include "kernels/check.h"

#define EXL3_CUDA_CHECK(expr)                                                               \
  do {                                                                                      \
    const cudaError_t exl3_cuda_err_ = (expr);                                              \
    if (exl3_cuda_err_ != cudaSuccess) [[unlikely]] {                                       \
      ::exl3::internal::check_failed(#expr, __FILE__, __LINE__,                             \
                                     cudaGetErrorString(exl3_cuda_err_));                   \
    }                                                                                       \
  } while (0)

// After a kernel launch: catches configuration errors at once.
#define EXL3_CUDA_CHECK_LAUNCH() EXL3_CUDA_CHECK(cudaGetLastError())
