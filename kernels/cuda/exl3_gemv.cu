// CUDA-core EXL3 GEMV C = A · Wq for m = 1..4 (exl3-format.md §4, §7): the tensor-core path would
// waste most of every mma on so few rows. A block stages its k-slice of A in shared memory as
// fp32; every warp owns one 16-column n-tile and walks the slice's k-tiles straight from global
// memory; each lane decodes its 8 positions of a tile with the shared per-lane extraction
// (exl3_tile.cuh), widens the exact fp16 codebook values to fp32 and accumulates them against the
// matching A values (tile rows 2t, 2t+1, 2t+8, 2t+9) into per-column partial sums, reduced over
// the 4 lanes sharing a column at the end. Split-K over blocks (fp32 atomics into a zeroed C)
// fills the GPU.
#include "kernels/cuda/exl3_gemv.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_tile.cuh"

namespace exl3 {
namespace {

using trellis::kTileSize;

constexpr int kWarpSize = 32;
constexpr int kWarps = 8;                        // one n-tile each
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kBlockCols = kWarps * kTileSize;  // 128 output columns per block
constexpr int kMaxRows = static_cast<int>(kGemvMaxRows);
constexpr int kBlocksPerSm = 8;                  // split-K target: full occupancy
constexpr int kMinTilesPerSplit = 8;             // enough work per warp to pay the atomics
constexpr int kMaxTilesPerSplit = 64;            // bounds the block's A slice in shared memory
constexpr int kSlicePairs = kMaxTilesPerSplit * kTileSize / 2;

struct GemvArgs {
  const __half* a;
  const uint32_t* trellis;  // tiles as stream words (§4.2)
  float* c;
  int m;
  int64_t k;
  int64_t n;
  int64_t tiles_per_split;  // k-tiles per blockIdx.y
  bool accumulate;          // split-K: add into C (zeroed by the launcher) instead of storing
};

__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t bits) {
  __half2 h;
  static_assert(sizeof(h) == sizeof(bits));
  memcpy(&h, &bits, sizeof(bits));
  return __half22float2(h);
}

template <int kBits, Codebook kCodebook>
__global__ void __launch_bounds__(kThreads) exl3_gemv_kernel(GemvArgs args) {
  constexpr int kWords = trellis::tile_words(kBits);

  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int group = lane / 4;     // output column group (and group + 8) of the tile
  const int in_group = lane % 4;  // tile rows 2·in_group, +1, +8, +9

  const int64_t tiles_n = args.n / kTileSize;
  const int64_t tn = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t tk_begin = static_cast<int64_t>(blockIdx.y) * args.tiles_per_split;
  const int num_tiles = static_cast<int>(
      std::max<int64_t>(0, std::min(args.tiles_per_split, args.k / kTileSize - tk_begin)));

  // The block's k-slice of A as fp32 pairs, shared by all warps: x[r][q] = A[r, k0 + 2q .. +1].
  __shared__ float2 x[kMaxRows][kSlicePairs];
  const int slice_pairs = num_tiles * kTileSize / 2;
  for (int idx = static_cast<int>(threadIdx.x); idx < args.m * slice_pairs; idx += kThreads) {
    const int r = idx / slice_pairs;
    const int q = idx % slice_pairs;
    const __half* src = args.a + r * args.k + tk_begin * kTileSize + 2 * q;
    x[r][q] = half2_bits_to_float2(__ldg(reinterpret_cast<const unsigned int*>(src)));
  }
  __syncthreads();

  const trellis::LaneWindow window = trellis::lane_window<kBits>(lane);
  const uint32_t* tile = args.trellis + (tk_begin * tiles_n + tn) * kWords;
  const int64_t tile_stride = tiles_n * kWords;

  // acc[r][0]: column group, acc[r][1]: column group + 8, partial over this lane's rows.
  float acc[kMaxRows][2];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r][0] = acc[r][1] = 0.0f;

#pragma unroll 4
  for (int i = 0; i < num_tiles; ++i) {
    const uint32_t* words = tile + i * tile_stride;
    uint32_t w[3] = {__ldg(words + window.word0), __ldg(words + window.word1), 0u};
    if constexpr (trellis::window_words<kBits>() > 2) w[2] = __ldg(words + window.word2);
    uint32_t b[4];
    trellis::decode_lane<kBits, kCodebook>(w, window.shift, b);
    float2 wf[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) wf[j] = half2_bits_to_float2(b[j]);

    const int q = i * kTileSize / 2 + in_group;
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= args.m) break;
      const float2 x_lo = x[r][q];      // tile rows 2t, 2t+1
      const float2 x_hi = x[r][q + 4];  // tile rows 2t+8, 2t+9
      float s0 = acc[r][0];
      s0 = fmaf(wf[0].x, x_lo.x, s0);
      s0 = fmaf(wf[0].y, x_lo.y, s0);
      s0 = fmaf(wf[1].x, x_hi.x, s0);
      s0 = fmaf(wf[1].y, x_hi.y, s0);
      acc[r][0] = s0;
      float s1 = acc[r][1];
      s1 = fmaf(wf[2].x, x_lo.x, s1);
      s1 = fmaf(wf[2].y, x_lo.y, s1);
      s1 = fmaf(wf[3].x, x_hi.x, s1);
      s1 = fmaf(wf[3].y, x_hi.y, s1);
      acc[r][1] = s1;
    }
  }

  // The 4 lanes of a group hold disjoint rows of the same two columns.
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float v = acc[r][half];
      v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
      v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
      acc[r][half] = v;
    }
  }
  if (in_group != 0) return;
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    if (r >= args.m) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float* dst = args.c + r * args.n + tn * kTileSize + group + 8 * half;
      if (args.accumulate) {
        atomicAdd(dst, acc[r][half]);
      } else {
        *dst = acc[r][half];
      }
    }
  }
}

}  // namespace

void launch_exl3_gemv(const Exl3GemmParams& p, int sm_count, cudaStream_t stream) {
  EXL3_CHECK(p.m >= 1 && p.m <= kGemvMaxRows, "m must be in 1..", kGemvMaxRows, ", got ", p.m);
  EXL3_CHECK(p.k > 0 && p.k % 128 == 0, "k must be a positive multiple of 128, got ", p.k);
  EXL3_CHECK(p.n > 0 && p.n % 128 == 0, "n must be a positive multiple of 128, got ", p.n);
  EXL3_CHECK(p.bits >= 1 && p.bits <= 8, "bits must be in 1..8, got ", p.bits);
  EXL3_CHECK(p.a != nullptr && p.trellis != nullptr && p.c != nullptr, "null pointer");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.a) % 16 == 0, "a must be 16-byte aligned");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.trellis) % 16 == 0, "trellis must be 16-byte aligned");
  EXL3_CHECK(sm_count > 0, "sm_count must be positive, got ", sm_count);

  const int64_t col_blocks = p.n / kBlockCols;
  const int64_t k_tiles = p.k / kTileSize;
  const int64_t wanted = (int64_t{kBlocksPerSm} * sm_count + col_blocks - 1) / col_blocks;
  const int64_t max_splits = std::max<int64_t>(1, k_tiles / kMinTilesPerSplit);
  const int64_t min_splits = (k_tiles + kMaxTilesPerSplit - 1) / kMaxTilesPerSplit;
  const int64_t target_splits = std::max(min_splits, std::min(wanted, max_splits));
  const int64_t per_split = (k_tiles + target_splits - 1) / target_splits;
  const int64_t splits = (k_tiles + per_split - 1) / per_split;
  EXL3_CHECK(splits <= 65535 && col_blocks <= std::numeric_limits<int32_t>::max(),
             "k or n too large: k=", p.k, " n=", p.n);

  EXL3_CHECK(per_split <= kMaxTilesPerSplit, "internal: split of ", per_split, " k-tiles");
  const GemvArgs args{p.a, reinterpret_cast<const uint32_t*>(p.trellis), p.c, static_cast<int>(p.m),
                      p.k, p.n, per_split, splits > 1};
  if (args.accumulate) {
    EXL3_CUDA_CHECK(cudaMemsetAsync(p.c, 0, static_cast<size_t>(p.m * p.n) * sizeof(float), stream));
  }
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
  const bool known = trellis::dispatch_format(p.bits, p.codebook, [&]<int kBits, Codebook kCodebook>() {
    exl3_gemv_kernel<kBits, kCodebook><<<grid, kThreads, 0, stream>>>(args);
  });
  EXL3_CHECK(known, "unknown codebook ", static_cast<int>(p.codebook));
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
