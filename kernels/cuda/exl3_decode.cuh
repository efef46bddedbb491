// CUDA trellis decode (exl3-format.md §4–§5): packed EXL3 tiles on the device -> the inner
// weight Wq in fp16 on the device, bit for bit the same as exl3_decode_ref.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace exl3 {

struct Exl3DecodeParams {
  const int16_t* trellis = nullptr;  // device, I16 [k/16, n/16, 16*bits], row-major
  __half* out = nullptr;             // device, F16 [k, n], row-major (rows = input features)
  int64_t k = 0;                     // input features, multiple of 16
  int64_t n = 0;                     // output features, multiple of 16
  int bits = 0;                      // K, 1..8
  Codebook codebook = Codebook::k3Inst;
};

// Contract (checked at entry, EXL3_CHECK aborts on violation):
//   - trellis and out are non-null device pointers that do not overlap; trellis is 4-byte
//     aligned and holds (k/16)·(n/16)·16·bits int16, out holds k·n halves;
//   - k > 0, n > 0, k % 16 == 0, n % 16 == 0, (k/16)·(n/16) / 8 < 2^31 (8 tiles per CUDA block);
//   - bits in 1..8; codebook is one of the three of ops.h.
// One warp decodes one 16x16 tile with the GEMM's tile decoder (exl3_tile.cuh), 8 positions per
// lane. Launch errors are checked with cudaGetLastError; the kernel runs asynchronously on `stream`.
void launch_exl3_decode(const Exl3DecodeParams& params, cudaStream_t stream);

}  // namespace exl3
