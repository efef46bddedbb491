// The int8 few-rows matmul's quantization of its input (kernels/int8_activations.h; the spec is
// kernels/ref/int8_activations_ref.cpp), shared by the GEMV's own staging of its k-slice
// (exl3_gemv_int8.cu) and the launch that stages the whole k ahead of it (exl3_gemv_stage_int8.cu):
// the staged layout of q and the rule for one 128-input block of a row.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/exl3_gemv_layout.cuh"
#include "kernels/cuda/exl3_tile.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3::gemv {

constexpr uint32_t kMul1Multiplier = 0x83DCD12Du;
constexpr float kMul1Inv = 0.00676727294921875f;  // KINV, fp16 0x1EEE
// value = KINV·t + kMul1Offset, t the byte sum: 1024·KINV + KBIAS = 6.9296875 - 10.3828125, exact.
constexpr float kMul1Offset = -3.453125f;
constexpr int kQMax = 127;

// Staged q: a row's tile i is 16 words, lane t = 0..3's uint4 {q at inputs 2t, 2t + 1, 2t + 8,
// 2t + 9}, each q repeated in all 4 bytes: the B registers of the tile's two products (first: b0,
// b1; second: b2, b3) for a lane of that row.
__device__ __forceinline__ int staged_word(int kk) {  // input kk of a tile -> word within the tile
  return 4 * ((kk % 8) / 2) + (kk & 1) + 2 * (kk / 8);
}

// One 128-input block of a row, quantized: the scale (amax / 127; 0 for an all-zero block, NaN for
// one with a NaN or infinite input) and Σ q, the same in every lane.
struct Int8Block {
  float scale;
  int qsum;
};

// Quantizes the warp's block of a row from v, the lane's kPerLane values of x's transform
// (transform_values; inputs kk0 + e of row_words, kk0 = the block's first input + kPerLane·lane):
// each value rounded to fp16, then amax, q = round(a · (127 / amax)) in -127..127, written as
// staged words into row_words (a row's staged words, in shared or global memory).
__device__ __forceinline__ Int8Block quantize_int8_block(float (&v)[wht128::kPerLane], int lane, int kk0,
                                                         uint32_t* row_words) {
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    v[e] = __half2float(__float2half_rn(v[e]));
    finite = finite && isfinite(v[e]);
    amax = fmaxf(amax, fabsf(v[e]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  finite = __all_sync(0xFFFFFFFFu, finite);
  const bool quantize = finite && amax > 0.0f;
  const float inv = quantize ? __fdiv_rn(static_cast<float>(kQMax), amax) : 0.0f;
  int qsum = 0;
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int q = quantize ? max(-kQMax, min(kQMax, __float2int_rn(__fmul_rn(v[e], inv)))) : 0;
    qsum += q;
    const int kk = kk0 + e;
    row_words[(kk / trellis::kTileSize) * 16 + staged_word(kk % trellis::kTileSize)] =
        static_cast<uint32_t>(q & 0xFF) * 0x01010101u;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) qsum += __shfl_xor_sync(0xFFFFFFFFu, qsum, offset);
  const float scale = !finite       ? __int_as_float(0x7FC00000)
                      : amax > 0.0f ? __fdiv_rn(amax, static_cast<float>(kQMax))
                                    : 0.0f;
  return {scale, qsum};
}

// Quantizes the warp's block (row, 128-input block `block`) of an m-row, k-input transformed input
// (v: transform_values' values) into the int8 kernel's prestaged layout: q at staged
// ([m][k tiles][16] words), scale · KINV at sides[row][block] and scale · Σ q at
// sides[m + row][block] ([m][k / 128] each). Every lane of the warp.
__device__ __forceinline__ void store_int8_block(uint32_t* staged, float* sides, int64_t m, int64_t k, int row,
                                                 int64_t block, int lane, float (&v)[wht128::kPerLane]) {
  constexpr int kBlockTiles = wht128::kBlock / trellis::kTileSize;
  const int64_t k_blocks = k / wht128::kBlock;
  uint32_t* words = staged + (row * (k / trellis::kTileSize) + block * kBlockTiles) * 16;
  const Int8Block q = quantize_int8_block(v, lane, wht128::kPerLane * lane, words);
  if (lane == 0) {
    const int64_t at = row * k_blocks + block;
    sides[at] = q.scale * kMul1Inv;
    sides[m * k_blocks + at] = q.scale * static_cast<float>(q.qsum);
  }
}

}  // namespace exl3::gemv
