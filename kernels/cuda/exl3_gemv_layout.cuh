// The few-rows EXL3 matmul's layout, shared by the kernel (exl3_gemv.cu) and its launch planner
// (exl3_gemv_plan.cpp): block shape, k-slices, the per-warp trellis ring, the staged A and what fits
// in a block's 48 KiB of shared memory.
#pragma once

#include <cuda_runtime.h>

namespace exl3::gemv {

// Words of one 16x16 trellis tile at K bits per weight (exl3-format.md §4.2; trellis::tile_words).
__host__ __device__ constexpr int tile_words(int bits) { return 8 * bits; }

constexpr int kWarpSize = 32;
constexpr int kWarps = 8;                        // one n-tile each
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kSliceTiles = 8;                   // k-slices are whole 128-input Hadamard blocks
constexpr int kStagedWords = 12288;              // 48 KiB per block: trellis rings + staged A
constexpr int kMaxTilesPerSlice = 64;
constexpr int kRowSumWords = 64;                 // MUL1's per-row sums of the staged A

constexpr int kFragmentWords = 4 * kWarpSize;  // one 16x16 tile of A (staged layout: exl3_gemv.cu)
constexpr int kMaxProblems = 3;                // linears of one input in one launch

__host__ __device__ constexpr int staged_words_per_tile(bool doubled) { return doubled ? 2 * kFragmentWords : kFragmentWords; }

// Trellis words travel through a per-warp ring in shared memory (cp.async, ring_stages stages of
// kStageTiles tiles, all but one in flight): deep enough to keep HBM busy without spending
// registers on loads in flight. One 16-byte cp.async per lane moves 512 bytes per warp. Wider
// tiles take fewer stages (each at most 2 KiB a warp), leaving room for the staged A.
constexpr int kStageTiles = 4;

__host__ __device__ constexpr int ring_stages(int bits) { return bits <= 4 ? 4 : bits == 5 ? 3 : 2; }

__host__ __device__ constexpr int ring_words(int bits) {  // per warp: at most 2 KiB
  return ring_stages(bits) * kStageTiles * tile_words(bits);
}

// The largest k-slice whose staged A fits beside the block's rings.
__host__ __device__ constexpr int max_tiles_per_slice(int bits, int m_blocks, bool doubled) {
  const int fit = (kStagedWords - kRowSumWords - kWarps * ring_words(bits)) /
                  (m_blocks * staged_words_per_tile(doubled)) /
                  kSliceTiles * kSliceTiles;
  return fit < kMaxTilesPerSlice ? fit : kMaxTilesPerSlice;
}
static_assert(max_tiles_per_slice(8, 4, false) >= kSliceTiles && max_tiles_per_slice(8, 1, true) >= kSliceTiles);

// Blocks per SM the registers must allow: 4 (64 registers) for one m-block, fewer where the
// accumulators of more m-blocks need the room. Shared memory (rings and staged A, 48 KiB) allows 4.
__host__ __device__ constexpr int blocks_per_sm(int m_blocks) { return m_blocks == 1 ? 4 : m_blocks == 2 ? 3 : 2; }

}  // namespace exl3::gemv
