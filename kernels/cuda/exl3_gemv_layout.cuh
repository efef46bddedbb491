// The few-rows EXL3 matmul's layout, shared by the kernel (exl3_gemv.cu) and its launch planner
// (exl3_gemv_plan.cpp): block shape, k-slices, the per-warp trellis ring, the staged A and what fits
// in a block's shared memory (48 KiB, more for 33-64 rows and the int8 kernel).
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
constexpr int kMaxSliceBlocks = kMaxTilesPerSlice / kSliceTiles;  // 128-input blocks of a slice
// A block that stages its own slice of A (MUL1, one or two m-blocks) keeps each (row, 128-input
// block)'s sum and adds a row's in block order, so that its row sums come out the same bits run to
// run (as the prestaged A's do). Three or four m-blocks (33-64 rows) stage their own slice only
// without a prestaging scratch (never in the backends) and add the blocks' sums with shared-memory
// atomics, in whatever order they land.
constexpr int kOrderedRowSumMBlocks = 2;
// The MUL1 row sums' shared memory: kRowSumWords, and the blocks' sums where ordered.
__host__ __device__ constexpr int row_sum_words(int m_blocks) {
  return kRowSumWords + (m_blocks <= kOrderedRowSumMBlocks ? 16 * m_blocks * kMaxSliceBlocks : 0);
}

constexpr int kFragmentWords = 4 * kWarpSize;  // one 16x16 tile of A (staged layout: exl3_gemv.cu)
constexpr int kMaxProblems = 3;                // linears of one input in one launch

__host__ __device__ constexpr int staged_words_per_tile(bool doubled) { return doubled ? 2 * kFragmentWords : kFragmentWords; }

// Whether the staged A takes the doubled layout (exl3_gemv_common.cuh): 3INST and MCG (not MUL1)
// with one m-block.
__host__ __device__ constexpr bool staged_doubled(bool mul1, int m_blocks) { return !mul1 && m_blocks == 1; }

// Trellis words travel through a per-warp ring in shared memory (cp.async, kRingSlots stages of
// stage_tiles tiles, all but one in flight): deep enough to keep HBM busy without spending
// registers on loads in flight. One 16-byte cp.async per lane moves 512 bytes per warp. The ring
// grows with K (at most 3 KiB a warp, at K = 6), leaving room for the staged A. Up to
// K = 6 a stage is 8 tiles in 2 slots (the same 2 KiB at K = 4 as 4 slots of 4 tiles): half the
// per-stage work (the wait, the barrier, the next copies) a tile. Measured against 4-tile stages
// (bench/results/2026-12-05-s15-h100): the fp16 linear at K = 4 2-4% faster at every shape and
// 1-32 rows on the H200 (8192x28672 at 1 row 66.3 -> 64.0 us), 2-6% at K = 2-4 on the H100; 8B
// decode with int8 off, batch 1-64, +1.7-4.3% (H200) and +1.4-3.4% (H100). Three slots of 8 tiles
// gained less. At K = 5, 6, 8-tile stages (a 2.5-3 KiB ring) measured 4-13% faster at 1-8 rows
// (session 15, run 3; the 6-bit head 4096x128256 at 1 row 187.9 -> 166.1 us on the H100).
__host__ __device__ constexpr int stage_tiles(int bits) { return bits <= 6 ? 8 : 4; }

constexpr int kRingSlots = 2;

__host__ __device__ constexpr int ring_words(int bits) {  // per warp: at most 3 KiB
  return kRingSlots * stage_tiles(bits) * tile_words(bits);
}
static_assert(ring_words(6) * 4 <= 3072 && ring_words(8) * 4 <= 2048);

// The fp16 linear kernel takes its A prestaged (exl3_gemv_stage.cu, one launch more) from this many
// rows on, where the scratch holds it: with every block of a slice transforming its slice of x
// itself, the transforms grow with rows x blocks per slice. Measured on the H200 (8B decode, int8
// off, three rounds, bench/results/2026-12-05-s11-h200 run 5): from 6 rows instead of 8, batch 6
// 1,542 / 1,522 / 1,520 -> 1,554 / 1,568 / 1,554 tokens/s, 7 1,760 / 1,735 / 1,750 -> 1,822 /
// 1,809 / 1,797; from 4 or 5 (run 4) batch 4 lost 3.6% and 5 was even.
constexpr int kGemvPrestageMinRows = 6;
// The planner prices a slice's partial products (GemvKernelShape::partial_rows) from this many rows
// on: pricing them from 6 with the prestaging lost the gain at 6-7 rows (run 5: 1,535 / 1,537 /
// 1,528 at batch 6).
constexpr int kGemvPricedPartialMinRows = 8;

// Blocks per SM the registers must allow: 4 (64 registers) for one m-block, fewer where the
// accumulators of more m-blocks need the room.
__host__ __device__ constexpr int blocks_per_sm(int m_blocks) { return m_blocks == 1 ? 4 : m_blocks == 2 ? 3 : 2; }

// A block's shared memory for its rings and staged A: 48 KiB for one m-block; with two to four,
// what their resident blocks (3 or 2) leave of an SM's 227 KiB (1 KiB of it reserved per block), so
// that 17-64 rows take slices as long as fewer rows do instead of ever shorter ones (each slice
// writes m x n partial products). Measured on the H200, 8B decode with int8 off: batch 64 4,774 ->
// 5,535 tokens/s. For two m-blocks it paid only once A was prestaged (exl3_gemv_stage.cu: with
// blocks staging their own slices, longer slices meant more of that work; batch 32 4,418 -> 4,025
// then, 4,838 -> 5,490 with A prestaged and the planner pricing partial products). Staged A is
// dynamic shared memory, opted into above 48 KiB.
__host__ __device__ constexpr int staged_budget_words(int m_blocks) {
  return m_blocks <= 1 ? kStagedWords : (227 * 1024 / blocks_per_sm(m_blocks) - 1024) / 4;
}

// The largest k-slice whose staged A fits beside the block's rings.
__host__ __device__ constexpr int max_tiles_per_slice(int bits, int m_blocks, bool doubled) {
  const int fit = (staged_budget_words(m_blocks) - row_sum_words(m_blocks) - kWarps * ring_words(bits)) /
                  (m_blocks * staged_words_per_tile(doubled)) /
                  kSliceTiles * kSliceTiles;
  return fit < kMaxTilesPerSlice ? fit : kMaxTilesPerSlice;
}
static_assert(max_tiles_per_slice(8, 4, false) >= kSliceTiles && max_tiles_per_slice(8, 1, true) >= kSliceTiles);

// The staged A's bytes (dynamic shared memory) of a block of m_blocks m-blocks and `tiles` tiles.
__host__ __device__ constexpr int staged_bytes(int m_blocks, int tiles, bool doubled) {
  return m_blocks * tiles * staged_words_per_tile(doubled) * 4;
}

// The int8 kernel (exl3_gemv_int8.cu) takes rows in groups of 8 (the n of its m16n8k32 products)
// and streams the trellis in stages of one 128-input block (the quantization block, kSliceTiles
// tiles). Its shared memory is sized per launch (dynamic): the rings, the staged q (per row 16
// words a tile and 16 of padding, which spreads the rows over the banks), and per (group, block,
// row) a scale and a scaled Σ q, per row a bias, and the fused RMSNorm's words.
constexpr int kInt8GroupRows = 8;
constexpr int kInt8MaxGroups = 4;
// The blocks per SM the int8 kernel's registers allow (its launch bounds): 4 for one group of rows,
// 3 for two, 2 for three or four.
__host__ __device__ constexpr int int8_blocks_per_sm(int groups) { return groups == 1 ? 4 : groups == 2 ? 3 : 2; }
// A block's shared memory at most: for one group 55 KiB, so that 4 blocks fit an SM's 227 KiB with
// their 1 KiB reserve (measured, a slice long enough to cost a block of residency is slower than
// more, shorter slices); for more groups what their resident blocks leave of an SM, so that 9-32
// rows, whose staged q takes 64 bytes a tile a row, still take slices of several blocks (55 KiB
// held one 128-input block of 32 rows: as many partial products as blocks of k; with the input
// prestaged too, 4096x28672 at 32 rows took 67.9 us instead of 101.9 on the H200). Opted into above
// 48 KiB.
__host__ __device__ constexpr int int8_smem_cap_words(int groups) {
  return groups <= 1 ? 55 * 256 : (227 * 1024 / int8_blocks_per_sm(groups) - 1024) / 4;
}
constexpr int kStaticSmemWords = 48 * 256;  // a kernel's static shared memory (the rings) at most

__host__ __device__ constexpr int int8_groups_of(int m) { return (m + kInt8GroupRows - 1) / kInt8GroupRows; }
__host__ __device__ constexpr int int8_ring_slots(int bits) { return bits <= 4 ? 3 : 2; }
// The int8 ring's stages are one 128-input block (kSliceTiles tiles).
__host__ __device__ constexpr int int8_ring_words(int bits) {  // per warp
  return int8_ring_slots(bits) * kSliceTiles * tile_words(bits);
}
__host__ __device__ constexpr int int8_row_words(int tiles) { return 16 * tiles + 16; }
// The fused RMSNorm (kGemvNormMaxRows rows at most): its shared memory (block_norm_scales), per
// row a sum per warp and the scale; the int8 kernel's is dynamic (its rings fill the static 48 KiB).
constexpr int kMaxNormRows = 2;
constexpr int kNormWords = kMaxNormRows * (kWarps + 1);

__host__ __device__ constexpr int int8_side_words(int groups) {
  return 2 * groups * kMaxSliceBlocks * kInt8GroupRows + groups * kInt8GroupRows + kNormWords;
}
__host__ __device__ constexpr int int8_smem_words(int bits, int m, int tiles) {
  return kWarps * int8_ring_words(bits) + m * int8_row_words(tiles) + int8_side_words(int8_groups_of(m));
}

// The largest k-slice (whole stages, at most kMaxTilesPerSlice tiles) whose shared memory fits
// int8_smem_cap_words.
__host__ __device__ constexpr int max_tiles_per_slice_int8(int bits, int m) {
  int tiles = kMaxTilesPerSlice;
  while (tiles > kSliceTiles && int8_smem_words(bits, m, tiles) > int8_smem_cap_words(int8_groups_of(m))) {
    tiles -= kSliceTiles;
  }
  return tiles;
}
static_assert(int8_smem_words(8, kInt8MaxGroups* kInt8GroupRows, kSliceTiles) <= int8_smem_cap_words(kInt8MaxGroups));
static_assert(kWarps * int8_ring_words(4) <= kStaticSmemWords && kWarps * int8_ring_words(8) <= kStaticSmemWords);

// The int8 linear takes its quantized input prestaged (exl3_gemv_stage_int8.cu, one launch more)
// from this many rows on, where the scratch holds it; below, every block of a k-slice quantizes
// its slice of x itself. Measured on the H200, 8B decode with int8 auto against no prestaging:
// batch 4 even (1,207 / 1,212 vs 1,205 / 1,226 tokens/s), 5 +1-3%, 6 +4-5%, 8 +8-9%, and at 1-2 rows
// the matmul takes the RMSNorm itself (never prestaged).
constexpr int kInt8PrestageMinRows = 5;

}  // namespace exl3::gemv
