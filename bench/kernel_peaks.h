// Peaks the kernels mode of exl3-bench compares each op against, measured in the same run: copy
// bandwidth (CUDA: device-to-device cudaMemcpyAsync timed with events; CPU: memcpy) and, on CUDA,
// the tensor-core rate of a cuBLAS fp16 GEMM (fp32 accumulate).
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

namespace exl3 {

struct MeasuredPeaks {
  double copy_gb_per_s = 0.0;             // (bytes read + bytes written) / time, 1 GB = 1e9 bytes
  uint64_t copy_bytes = 0;                // size of the copied buffer
  std::optional<double> gemm_flop_per_s;  // CUDA only: 2 n^3 / time of an n^3 fp16 GEMM
  int64_t gemm_n = 0;
};

// Host memcpy of `bytes` (mean over `iters` after one warm-up).
absl::StatusOr<MeasuredPeaks> measure_cpu_peaks(uint64_t bytes, int iters);

// On CUDA device `device`: a device-to-device copy of `bytes` and an n^3 fp16 GEMM. UNIMPLEMENTED
// in builds without CUDA.
absl::StatusOr<MeasuredPeaks> measure_cuda_peaks(int device, uint64_t bytes, int64_t gemm_n, int iters);

}  // namespace exl3
