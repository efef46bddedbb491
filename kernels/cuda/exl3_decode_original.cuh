// CUDA decode of an EXL3 weight into the original basis (exl3-format.md §3, §7 item 3): packed
// trellis tiles, suh and svh -> W = diag(suh) · BD(H) · Wq · BD(H) · diag(svh) in fp16, for a range
// of whole 128x128 blocks; the long-prefill GEMM multiplies the raw activations by it
// (exl3_decode_gemm.h). Bit for bit the same as exl3_decode_original_ref.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace exl3 {

// Decodes W[i][j] for i in [row0, row0 + rows) and j in [col0, col0 + cols) into
// out[(i - row0) · ld + (j - col0)].
struct Exl3DecodeOriginalParams {
  const int16_t* trellis = nullptr;  // device, I16 [k/16, n/16, 16*bits], row-major: the whole weight
  const __half* suh = nullptr;       // device, [k]
  const __half* svh = nullptr;       // device, [n]
  __half* out = nullptr;             // device, F16 [rows, ld], row-major (rows = input features)
  int64_t k = 0;                     // input features (padded), multiple of 128
  int64_t n = 0;                     // output features (padded), multiple of 128
  int64_t row0 = 0, rows = 0;        // multiples of 128, rows > 0, row0 + rows <= k
  int64_t col0 = 0, cols = 0;        // multiples of 128, cols > 0, col0 + cols <= n
  int64_t ld = 0;                    // halves between output rows, >= cols
  int bits = 0;                      // K, 1..8
  Codebook codebook = Codebook::k3Inst;
};

// Contract (checked at entry, EXL3_CHECK aborts on violation):
//   - trellis, suh, svh, out non-null device pointers; trellis 16-byte aligned; out does not
//     overlap the inputs;
//   - the shapes above; cols / 128 < 2^31 and rows / 128 <= 65535 (one CUDA block per 128x128
//     block of W); bits in 1..8; codebook one of the three of ops.h.
// Numerics: exl3_decode_original_ref.h (fp32 butterflies along rows, then columns, one scale, one
// rounding to fp16): the same operations in the same order, so the result is bit-identical.
// One CUDA block of 128 threads per 128x128 block, ~66 KiB + 2·bits KiB of dynamic shared memory
// (the fp32 block plus its 64 trellis tiles): the tiles are decoded into shared memory, thread t
// transforms row t, then column t, in registers, scales and writes column t (coalesced across the
// warp). Launch errors are checked with cudaGetLastError; the kernel runs asynchronously on `stream`.
void launch_exl3_decode_original(const Exl3DecodeOriginalParams& params, cudaStream_t stream);

}  // namespace exl3
