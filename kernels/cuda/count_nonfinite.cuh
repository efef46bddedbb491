// Counts the non-finite values (±inf, NaN) of an F16 device array and finds the first one: the
// overflow check behind the CUDA backend's conversions to F16 (a value beyond ±65504 rounds to
// infinity, which is refused by name rather than stored).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace exl3 {

// result[0] = number of non-finite values in x[0..n), result[1] = the smallest such index, or
// UINT64_MAX when there is none. result is device memory the launcher initialises on `stream`.
// Contract: n >= 0; x and result non-null device pointers (x may be null when n == 0).
struct CountNonfiniteParams {
  const __half* x = nullptr;
  int64_t n = 0;
  unsigned long long* result = nullptr;  // [2]
};
void launch_count_nonfinite(const CountNonfiniteParams& p, cudaStream_t stream);

}  // namespace exl3
