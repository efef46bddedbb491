// CUDA decode into the original basis (exl3_decode_original.cuh): per 128x128 block, the 64
// trellis tiles are staged in shared memory, decoded with the tile decoder the GEMM uses
// (exl3_tile.cuh) into an fp32 block in shared memory, transformed along rows and then columns with
// in-register butterflies (one thread per row, then per column), scaled and rounded once.
#include "kernels/cuda/exl3_decode_original.cuh"

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dynamic_shared_memory.cuh"
#include "kernels/cuda/exl3_tile.cuh"

namespace exl3 {
namespace {

constexpr int kWarpSize = 32;
constexpr int kBlock = 128;       // Hadamard block = CUDA block's tile of W
constexpr int kThreads = kBlock;  // thread t: row t, then column t
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kTilesPerSide = kBlock / trellis::kTileSize;  // 8
constexpr int kTiles = kTilesPerSide * kTilesPerSide;       // 64 trellis tiles per block
constexpr int kPitch = kBlock + 1;                          // floats per shared row (129 = 1 mod 32 banks)
constexpr int kHadamardStages = 7;                          // log2(128)
constexpr float kInv128 = 1.0f / 128.0f;

constexpr size_t kMatrixBytes = sizeof(float) * kBlock * kPitch;
constexpr size_t kScaleBytes = sizeof(float) * kBlock;
static_assert(kMatrixBytes % 16 == 0 && kScaleBytes % 16 == 0,
              "the scales and the staged trellis are read as 16 bytes");

constexpr size_t shared_bytes(int bits) {
  return kMatrixBytes + kScaleBytes + sizeof(uint32_t) * kTiles * trellis::tile_words(bits);
}

// Shared-memory column of W's column c within the block: bits 2..1 and 4..3 of c swapped. With the
// odd pitch, the row pass (thread t at row t, one column at a time), the column pass (thread t at
// column t) and the decode's stores (a lane writes rows 2(l%4) + e of column l/4 of a tile) each
// reach 32 distinct banks per warp access.
__device__ __forceinline__ constexpr int swizzle(int c) { return (c & 0x61) | ((c & 0x06) << 2) | ((c & 0x18) >> 2); }

// Unscaled Sylvester butterfly of 128 values held in registers, stages h = 1, 2, ..., 64 with pairs
// (i, i + h) -> (a + b, a - b): the order of exl3_decode_original_ref.
__device__ __forceinline__ void butterflies(float (&v)[kBlock]) {
#pragma unroll
  for (int stage = 0; stage < kHadamardStages; ++stage) {
    const int h = 1 << stage;
#pragma unroll
    for (int i = 0; i < kBlock; ++i) {
      if ((i & h) != 0) continue;
      const float a = v[i];
      const float b = v[i + h];
      v[i] = __fadd_rn(a, b);
      v[i + h] = __fsub_rn(a, b);
    }
  }
}

// One CUDA block per 128x128 block of W: blockIdx.x the column block, blockIdx.y the row block of
// the decoded range. `out` points at the range's first element.
template <int kBits, Codebook kCodebook>
__global__ void __launch_bounds__(kThreads)
    exl3_decode_original_kernel(const uint32_t* __restrict__ trellis, const __half* __restrict__ suh,
                                const __half* __restrict__ svh, __half* __restrict__ out, int64_t tiles_n, int64_t row0,
                                int64_t col0, int64_t ld) {
  extern __shared__ float4 shared[];
  float* matrix = reinterpret_cast<float*>(shared);                   // [kBlock][kPitch]
  float* row_scale = matrix + kBlock * kPitch;                        // suh / 128 of the block's rows
  uint32_t* words = reinterpret_cast<uint32_t*>(row_scale + kBlock);  // tile (r, c) at (8r + c) · tile_words

  constexpr int kTileWords = trellis::tile_words(kBits);
  constexpr int kRowVectors = kTilesPerSide * kTileWords / 4;  // uint4 per row of 8 tiles: 16 · bits
  const int t = static_cast<int>(threadIdx.x);
  const int64_t first_row = row0 + static_cast<int64_t>(blockIdx.y) * kBlock;
  const int64_t first_col = col0 + static_cast<int64_t>(blockIdx.x) * kBlock;

  // The block's tiles: 8 rows of 8 consecutive tiles, each row contiguous in the trellis.
  {
    const int64_t tile_k0 = first_row / trellis::kTileSize;
    const int64_t tile_n0 = first_col / trellis::kTileSize;
    auto* staged = reinterpret_cast<uint4*>(words);
#pragma unroll
    for (int q = 0; q < kBits; ++q) {  // kTilesPerSide · kRowVectors = kThreads · kBits vectors
      const int v = q * kThreads + t;
      const int tile_row = v / kRowVectors;
      const auto* src =
          reinterpret_cast<const uint4*>(trellis + ((tile_k0 + tile_row) * tiles_n + tile_n0) * kTileWords);
      staged[v] = __ldg(src + v % kRowVectors);
    }
  }
  row_scale[t] = __half2float(suh[first_row + t]) * kInv128;
  const float col_scale = __half2float(svh[first_col + t]);
  __syncthreads();

  // Decode: warp w takes tiles w, w + 4, ...; lane l's positions 8l .. 8l + 7 land at their
  // (row, column) of the tile (§4.4).
  {
    const int warp = t / kWarpSize;
    const int lane = t % kWarpSize;
    const trellis::LaneWindow win = trellis::lane_window<kBits>(lane);
#pragma unroll 2
    for (int tile = warp; tile < kTiles; tile += kWarps) {
      const uint32_t* tw = words + tile * kTileWords;
      uint32_t w[3] = {tw[win.word0], tw[win.word1], 0};
      if constexpr (trellis::window_words<kBits>() > 2) w[2] = tw[win.word2];
      uint32_t b[4];
      trellis::decode_lane<kBits, kCodebook>(w, win.shift, b);
      float* tile_out = matrix + (tile / kTilesPerSide) * trellis::kTileSize * kPitch;
      const int tile_col = (tile % kTilesPerSide) * trellis::kTileSize;
      // The lane's two columns: one for positions 8l .. 8l + 3, one for 8l + 4 .. 8l + 7.
      const int first = trellis::kPositionsPerLane * lane;
      const int columns[2] = {swizzle(tile_col + trellis::position_col(first)),
                              swizzle(tile_col + trellis::position_col(first + 4))};
#pragma unroll
      for (int i = 0; i < trellis::kPositionsPerLane; ++i) {
        const int p = trellis::kPositionsPerLane * lane + i;
        const auto value = static_cast<unsigned short>(b[i / 2] >> (16 * (i % 2)));
        tile_out[trellis::position_row(p) * kPitch + columns[i / 4]] = __half2float(__ushort_as_half(value));
      }
    }
  }
  __syncthreads();

  float v[kBlock];
  // Along row t (each thread reads and writes only its own row).
  {
    float* row = matrix + t * kPitch;
#pragma unroll
    for (int j = 0; j < kBlock; ++j) v[j] = row[swizzle(j)];
    butterflies(v);
#pragma unroll
    for (int j = 0; j < kBlock; ++j) row[swizzle(j)] = v[j];
  }
  __syncthreads();

  // Down column t, then scale, round and store: a warp writes 32 consecutive halves of a row.
  const float* column = matrix + swizzle(t);
#pragma unroll
  for (int i = 0; i < kBlock; ++i) v[i] = column[i * kPitch];
  butterflies(v);
  __half* dst = out + static_cast<int64_t>(blockIdx.y) * kBlock * ld + static_cast<int64_t>(blockIdx.x) * kBlock + t;
  const auto* row_scale4 = reinterpret_cast<const float4*>(row_scale);  // broadcast reads, 4 rows each
#pragma unroll
  for (int i = 0; i < kBlock; i += 4) {
    const float4 su = row_scale4[i / 4];
    const float scales[4] = {su.x, su.y, su.z, su.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float s = __fmul_rn(scales[e], col_scale);  // exact
      dst[(i + e) * ld] = __float2half_rn(__fmul_rn(v[i + e], s));
    }
  }
}

}  // namespace

void launch_exl3_decode_original(const Exl3DecodeOriginalParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.trellis != nullptr && p.suh != nullptr && p.svh != nullptr && p.out != nullptr,
             "decode_original: null pointer");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.trellis) % 16 == 0, "decode_original: trellis must be 16-byte aligned");
  EXL3_CHECK(p.k > 0 && p.k % kBlock == 0 && p.n > 0 && p.n % kBlock == 0,
             "decode_original: k and n must be positive multiples of 128, got k=", p.k, " n=", p.n);
  EXL3_CHECK(p.rows > 0 && p.row0 >= 0 && p.row0 % kBlock == 0 && p.rows % kBlock == 0 && p.row0 + p.rows <= p.k,
             "decode_original: rows [", p.row0, ", ", p.row0 + p.rows, ") of k=", p.k,
             " must be a non-empty range of whole 128-blocks");
  EXL3_CHECK(p.cols > 0 && p.col0 >= 0 && p.col0 % kBlock == 0 && p.cols % kBlock == 0 && p.col0 + p.cols <= p.n,
             "decode_original: columns [", p.col0, ", ", p.col0 + p.cols, ") of n=", p.n,
             " must be a non-empty range of whole 128-blocks");
  EXL3_CHECK(p.ld >= p.cols, "decode_original: ld ", p.ld, " < cols ", p.cols);
  const int64_t grid_x = p.cols / kBlock;
  const int64_t grid_y = p.rows / kBlock;
  EXL3_CHECK(grid_x <= std::numeric_limits<int32_t>::max() && grid_y <= 65535, "decode_original: ", p.rows, "x", p.cols,
             " is too large for one launch");

  const auto* words = reinterpret_cast<const uint32_t*>(p.trellis);
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  const bool known = trellis::dispatch_format(p.bits, p.codebook, [&]<int kBits, Codebook kCodebook>() {
    constexpr size_t kShared = shared_bytes(kBits);
    allow_shared_bytes<exl3_decode_original_kernel<kBits, kCodebook>>(kShared);
    exl3_decode_original_kernel<kBits, kCodebook><<<grid, kThreads, kShared, stream>>>(words, p.suh, p.svh, p.out, p.n / trellis::kTileSize, p.row0, p.col0,
                                                p.ld);
  });
  EXL3_CHECK(known, "decode_original: unsupported format: bits ", p.bits, " codebook ", static_cast<int>(p.codebook),
             " (bits must be in 1..8)");
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
