// CUDA blockwise 128-point Walsh-Hadamard transform, fp32 in place: the device twin of
// hadamard128_ref (every consecutive 128-block of each row times H128 / sqrt(128)).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace exl3 {

struct Hadamard128Params {
  float* data = nullptr;  // device, F32 [rows, cols], row-major, transformed in place
  int64_t rows = 0;
  int64_t cols = 0;       // multiple of 128
};

// Contract (checked at entry, EXL3_CHECK aborts on violation):
//   - rows >= 0, cols >= 0, cols % 128 == 0; nothing is launched when rows·cols == 0;
//   - data is a device pointer aligned to 16 bytes (vector loads of 4 floats), non-null unless
//     rows·cols == 0;
//   - rows·cols / 128 < 2^31 · 8 (one warp per 128-block, 8 warps per CUDA block).
// Same butterfly order as the reference, so results agree with it to fp32 rounding (in practice
// bit for bit). Runs asynchronously on `stream`; launch errors are checked.
void launch_hadamard128(const Hadamard128Params& params, cudaStream_t stream);

}  // namespace exl3
