// Internal to the EXL3 GEMM (exl3_gemm.cu): the CUDA-core GEMV path for m = 1..kGemvMaxRows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/exl3_linear.cuh"

namespace exl3 {

constexpr int64_t kGemvMaxRows = 4;

// C = A · Wq for 1 <= m <= kGemvMaxRows without tensor cores: every lane decodes its 8 weights of
// a tile (exl3_tile.cuh) and accumulates their products with A in fp32. Contract as
// launch_exl3_gemm plus m in 1..kGemvMaxRows (EXL3_CHECK); sm_count is the device's SM count (it
// sizes the split-K). Asynchronous on `stream`; with split-K, C is zeroed with cudaMemsetAsync.
void launch_exl3_gemv(const Exl3GemmParams& p, int sm_count, cudaStream_t stream);

}  // namespace exl3
