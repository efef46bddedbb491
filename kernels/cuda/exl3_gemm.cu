// CUDA EXL3 GEMM C = A · Wq with the trellis decoded on the fly (exl3-format.md §4, §7): every warp
// owns one 16-column n-tile and walks a range of k-tiles, streaming the packed tiles through a
// private cp.async ring in shared memory, decoding each tile straight into mma.m16n8k16 B
// fragments (exl3_tile.cuh) and multiplying it with up to 8 16-row blocks of A. The trellis is
// never expanded in memory. One pass per 128 rows. Split-K over blocks (fp32 atomics into a zeroed
// C) keeps every SM busy when the output alone does not. m <= kGemvMaxRows takes the few-rows path
// (exl3_gemv.cu), which streams the trellis once for all rows.
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_linear.cuh"
#include "kernels/cuda/exl3_tile.cuh"

namespace exl3 {
namespace {

using trellis::kTileSize;

constexpr int kWarpSize = 32;
constexpr int kWarps = 8;                              // one n-tile each
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kBlockCols = kWarps * kTileSize;        // 128 output columns per block
constexpr int kStageTiles = 4;                         // k-tiles per cp.async group
constexpr int kStages = 4;                             // ring depth: 3 groups in flight
constexpr int kWideMBlocks = 8;                        // 128 rows per pass
constexpr int kMinTilesPerSplit = 2 * kStageTiles;     // enough work per block to pay the atomics
// Register budget: at least this many blocks resident per SM (<= 64 / 128 registers a thread).
template <int kMBlocks>
constexpr int kMinBlocksPerSm = kMBlocks == 1 ? 4 : 2;

struct GemmArgs {
  const __half* a;
  const uint32_t* trellis;  // tiles as stream words (§4.2)
  float* c;
  int64_t m;
  int64_t k;
  int64_t n;
  int64_t tiles_per_split;  // k-tiles per blockIdx.y
  bool accumulate;          // split-K: add into C (zeroed by the launcher) instead of storing
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// d += a · b for one m16n8k16 product, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two consecutive fp16 of A (row, col), zero for rows past m (the padding of the last m-block).
__device__ __forceinline__ uint32_t load_a_pair(const __half* a, int64_t m, int64_t k, int64_t row,
                                                int64_t col) {
  if (row >= m) return 0u;
  return __ldg(reinterpret_cast<const unsigned int*>(a + row * k + col));
}

__device__ __forceinline__ void store_c(float* c, float v, bool accumulate) {
  if (accumulate) {
    atomicAdd(c, v);
  } else {
    *c = v;
  }
}

template <int kBits, Codebook kCodebook, int kMBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<kMBlocks>) exl3_gemm_kernel(GemmArgs args) {
  constexpr int kWords = trellis::tile_words(kBits);
  constexpr int kChunksPerTile = kWords / 4;  // 16-byte cp.async chunks
  constexpr int kStageWords = kStageTiles * kWords;
  __shared__ __align__(16) uint32_t ring[kWarps][kStages][kStageWords];

  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int group = lane / 4;       // mma groupID: A/C row, B column
  const int in_group = lane % 4;    // mma threadID_in_group: A/B k pair, C column pair

  const int64_t tiles_n = args.n / kTileSize;
  const int64_t tn = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t tk_begin = static_cast<int64_t>(blockIdx.y) * args.tiles_per_split;
  const int num_tiles =
      static_cast<int>(std::max<int64_t>(0, std::min(args.tiles_per_split, args.k / kTileSize - tk_begin)));
  const int num_stages = (num_tiles + kStageTiles - 1) / kStageTiles;
  const int64_t row_base = static_cast<int64_t>(blockIdx.z) * kMBlocks * kTileSize;
  const int active_blocks =
      static_cast<int>(std::min<int64_t>(kMBlocks, (args.m - row_base + kTileSize - 1) / kTileSize));

  // Tile (tk, tn) starts at word (tk·tiles_n + tn)·kWords; this warp's column of tiles is strided.
  const uint32_t* column = args.trellis + (tk_begin * tiles_n + tn) * kWords;
  const int64_t tile_stride = tiles_n * kWords;
  uint32_t* my_ring = &ring[warp][0][0];

  const auto issue_stage = [&](int stage) {
    uint32_t* dst = my_ring + (stage % kStages) * kStageWords;
    const int first = stage * kStageTiles;
    for (int chunk = lane; chunk < kStageTiles * kChunksPerTile; chunk += kWarpSize) {
      const int i = chunk / kChunksPerTile;
      const int word = (chunk % kChunksPerTile) * 4;
      if (first + i < num_tiles) {
        cp_async16(dst + i * kWords + word, column + (first + i) * tile_stride + word);
      }
    }
  };

  const trellis::LaneWindow window = trellis::lane_window<kBits>(lane);
  float acc[kMBlocks][2][4];
#pragma unroll
  for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[mb][i / 4][i % 4] = 0.0f;
  }

#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < num_stages) issue_stage(stage);
    cp_async_commit();
  }
  for (int stage = 0; stage < num_stages; ++stage) {
    // Group `stage` has landed for this lane; the warp barrier publishes every lane's copies and
    // also ends all reads of the slot that the next issue overwrites (read one iteration ago).
    cp_async_wait<kStages - 2>();
    __syncwarp();
    if (stage + kStages - 1 < num_stages) issue_stage(stage + kStages - 1);
    cp_async_commit();

    const uint32_t* slot = my_ring + (stage % kStages) * kStageWords;
    // Unrolled only for the skinny kernel: the wide one's 64 accumulators need the registers.
#pragma unroll(kMBlocks == 1 ? kStageTiles : 1)
    for (int i = 0; i < kStageTiles; ++i) {
      const int tile = stage * kStageTiles + i;
      if (tile >= num_tiles) break;
      const uint32_t* words = slot + i * kWords;
      uint32_t w[3] = {words[window.word0], words[window.word1], 0u};
      if constexpr (trellis::window_words<kBits>() > 2) w[2] = words[window.word2];
      uint32_t b[4];
      trellis::decode_lane<kBits, kCodebook>(w, window.shift, b);

      const int64_t col = (tk_begin + tile) * kTileSize + 2 * in_group;
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
        if (mb >= active_blocks) break;
        const int64_t row = row_base + mb * kTileSize + group;
        const uint32_t a[4] = {load_a_pair(args.a, args.m, args.k, row, col),
                               load_a_pair(args.a, args.m, args.k, row + 8, col),
                               load_a_pair(args.a, args.m, args.k, row, col + 8),
                               load_a_pair(args.a, args.m, args.k, row + 8, col + 8)};
        mma_16816(acc[mb][0], a, b[0], b[1]);
        mma_16816(acc[mb][1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

  // C fragment: registers 0, 1 at (row group, columns 2·in_group + 0, 1), 2, 3 at row group + 8.
#pragma unroll
  for (int mb = 0; mb < kMBlocks; ++mb) {
    if (mb >= active_blocks) break;
    const int64_t row = row_base + mb * kTileSize + group;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t col = tn * kTileSize + half * 8 + 2 * in_group;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (row + 8 * r >= args.m) continue;
        float* dst = args.c + (row + 8 * r) * args.n + col;
        store_c(dst, acc[mb][half][2 * r], args.accumulate);
        store_c(dst + 1, acc[mb][half][2 * r + 1], args.accumulate);
      }
    }
  }
}


// Number of k-slices: none while the output grid alone gives every SM two blocks, otherwise enough
// for about four blocks per SM, each slice keeping at least kMinTilesPerSplit k-tiles.
int64_t tiles_per_split(int64_t output_blocks, int64_t k_tiles) {
  const int64_t sms = device_sm_count();
  if (output_blocks >= 2 * sms) return k_tiles;
  const int64_t wanted = (4 * sms + output_blocks - 1) / output_blocks;
  const int64_t max_splits = std::max<int64_t>(1, k_tiles / kMinTilesPerSplit);
  const int64_t splits = std::min(wanted, max_splits);
  return (k_tiles + splits - 1) / splits;
}

}  // namespace

// SM count of the current device, queried once per device (launches may be graph-captured).
int device_sm_count() {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  int device = 0;
  EXL3_CUDA_CHECK(cudaGetDevice(&device));
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int cached = cache[static_cast<size_t>(device)].load(std::memory_order_relaxed);
    if (cached > 0) return cached;
  }
  int count = 0;
  EXL3_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  if (cacheable) cache[static_cast<size_t>(device)].store(count, std::memory_order_relaxed);
  return count;
}

void launch_exl3_gemm(const Exl3GemmParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.m >= 0, "m must be >= 0, got ", p.m);
  EXL3_CHECK(p.k > 0 && p.k % 128 == 0, "k must be a positive multiple of 128, got ", p.k);
  EXL3_CHECK(p.n > 0 && p.n % 128 == 0, "n must be a positive multiple of 128, got ", p.n);
  EXL3_CHECK(p.bits >= 1 && p.bits <= 8, "bits must be in 1..8, got ", p.bits);
  EXL3_CHECK(p.a != nullptr && p.trellis != nullptr && p.c != nullptr, "null pointer");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.a) % 16 == 0, "a must be 16-byte aligned");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.trellis) % 16 == 0, "trellis must be 16-byte aligned");
  if (p.m == 0) return;
  if (p.m <= kGemvMaxRows) {
    launch_exl3_gemv(p, device_sm_count(), stream);
    return;
  }

  const int64_t rows_per_pass = kWideMBlocks * kTileSize;
  const int64_t passes = (p.m + rows_per_pass - 1) / rows_per_pass;
  const int64_t col_blocks = p.n / kBlockCols;
  const int64_t k_tiles = p.k / kTileSize;
  const int64_t per_split = tiles_per_split(col_blocks * passes, k_tiles);
  const int64_t splits = (k_tiles + per_split - 1) / per_split;
  EXL3_CHECK(passes <= 65535, "m too large: ", p.m);
  EXL3_CHECK(splits <= 65535 && col_blocks <= std::numeric_limits<int32_t>::max(),
             "k or n too large: k=", p.k, " n=", p.n);

  GemmArgs args{p.a, reinterpret_cast<const uint32_t*>(p.trellis), p.c, p.m, p.k, p.n, per_split,
                splits > 1};
  if (args.accumulate) {
    EXL3_CUDA_CHECK(cudaMemsetAsync(p.c, 0, static_cast<size_t>(p.m * p.n) * sizeof(float), stream));
  }
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits),
                  static_cast<unsigned>(passes));
  const bool known = trellis::dispatch_format(p.bits, p.codebook, [&]<int kBits, Codebook kCodebook>() {
    exl3_gemm_kernel<kBits, kCodebook, kWideMBlocks><<<grid, kThreads, 0, stream>>>(args);
  });
  EXL3_CHECK(known, "unknown codebook ", static_cast<int>(p.codebook));
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
