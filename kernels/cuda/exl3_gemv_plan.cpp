// The few-rows EXL3 matmul's launch planner (exl3_gemv_plan.h).
#include "kernels/cuda/exl3_gemv_plan.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/exl3_gemv_layout.cuh"

namespace exl3::gemv {
namespace {

constexpr double kSetupGroups = 1.5;
constexpr double kSliceGroups = 0.05;
// Both kernels are issue-bound and still gain from their fourth resident block (measured on the
// H200: int8, 4096x28672 at 1 row, 3.29 -> 4.16 G weights/ms; fp16, the 8B model's decode at
// batch 4 and 16, +6% and +9.5%), so a linear's plan counts every resident block as running at
// full speed. The bare matmul's slices add into C with atomics, which contend more the more of
// them run at once: it keeps counting 3 (4096x28672 at 16 rows: 49.0 us with 3, 61.3 with 4).
constexpr double kBareSaturatingBlocks = 3.0;
// A slice's partial products cost memory time: written by the matmul (overlapping its decode, so
// counted half) and read back by the output pass, at about the H200's copy rate (4.2 TB/s,
// 3.3 sustained by these small scattered writes and reads), in bytes per microsecond.
constexpr double kPartialTraffic = 1.5;
constexpr double kPartialBytesPerUs = 3.3e6;
// The fp16 kernel's time for one group of kSliceTiles tiles per warp at full occupancy, measured
// kernel by kernel in the 8B decode on the H200 (K=4, Nsight Compute durations over the planner's
// groups): 2.8 us at 32 rows (gate/up 63.4 us for 22.3 groups, down 38.2 for 14.3). One m-block
// and 3-4 are scaled from it by their tensor-core products per tile (estimates).
constexpr double kFp16GroupUs[4] = {2.2, 2.8, 3.6, 4.4};
// The int8 kernel's, by groups of 8 rows: 1.8 us for one (8192x28672 at 1 row, 48.7 us for 27
// groups a warp, session 18, then in two-block stages), the rest estimates (its products per tile
// grow with the groups; 9-32 rows only the tests and exl3-bench gemv ask for: the backends stop at
// kInt8ActivationsMaxRows).
constexpr double kInt8GroupUs[4] = {1.8, 2.2, 2.6, 3.0};

}  // namespace

int m_blocks(int64_t m) { return static_cast<int>((m + 15) / 16); }

namespace {

// The fp16 kernel's resident blocks.
int resident_blocks(int64_t m) { return blocks_per_sm(m_blocks(m)); }

// Resident int8 blocks: registers (the launch bounds) or shared memory (an SM's 227 KiB, 1 KiB of
// it reserved per block), whichever allows fewer.
int int8_resident_blocks(int rows, int bits) {
  const int words = int8_smem_words(bits, rows, max_tiles_per_slice_int8(bits, rows));
  const int by_smem = (227 * 1024) / (words * 4 + 1024);
  return std::max(1, std::min(int8_blocks_per_sm(int8_groups_of(rows)), by_smem));
}

GemvKernelShape int8_shape(int rows, int bits) {
  GemvKernelShape s;
  s.blocks_per_sm = int8_resident_blocks(rows, bits);
  s.saturating_blocks = s.blocks_per_sm;
  s.max_tiles = max_tiles_per_slice_int8(bits, rows);
  // Past one group of rows (prestaged q) the slices' partial products are priced as for the fp16
  // kernel's prestaged A. Not for one group, prestaged from kInt8PrestageMinRows rows or not:
  // pricing them at 5-8 rows took longer slices for the 8B's gate/up (4096x28672 at 8 rows 33.2 ->
  // 34.8 us) and measured slower in the model (8B decode batch 8 with int8 auto 2,298 / 2,291 ->
  // 2,232 / 2,226 tokens/s, bench/results/2026-12-05-s11-h200 run 3).
  s.partial_rows = rows > kInt8GroupRows ? rows : 0;
  s.group_us = kInt8GroupUs[std::clamp(int8_groups_of(rows), 1, kInt8MaxGroups) - 1];
  return s;
}

}  // namespace

GemvKernelShape gemv_kernel_shape(int64_t m, int bits, Codebook codebook, bool int8) {
  if (int8) return int8_shape(static_cast<int>(m), bits);
  GemvKernelShape s;
  s.blocks_per_sm = resident_blocks(m);
  s.saturating_blocks = s.blocks_per_sm;
  s.max_tiles = max_tiles_per_slice(bits, m_blocks(m), staged_doubled(codebook == Codebook::kMul1, m_blocks(m)));
  // Prestaged A (kGemvPrestageMinRows rows on): a longer slice costs no more staging, so its fewer
  // partial products are what the model weighs, from kGemvPricedPartialMinRows rows. Below, every
  // block of a slice stages it, which the model does not price; their measured plans keep
  // kSliceGroups alone (and so do 6-7 rows, prestaged: measured faster).
  s.partial_rows = m >= kGemvPricedPartialMinRows ? static_cast<int>(m) : 0;
  s.group_us = kFp16GroupUs[std::clamp(m_blocks(m), 1, 4) - 1];
  return s;
}

GemvKernelShape bare_kernel_shape(int64_t m, int bits, Codebook codebook) {
  GemvKernelShape s = gemv_kernel_shape(m, bits, codebook, false);
  s.saturating_blocks = std::min<double>(kBareSaturatingBlocks, s.blocks_per_sm);
  s.partial_rows = 0;  // atomics into C: its constants were measured with kSliceGroups alone
  return s;
}

GemvGrid plan_grid(int64_t n_tiles, int64_t k_tiles, int sm_count, const GemvKernelShape& kernel, int64_t max_slices) {
  const int64_t groups = k_tiles / kSliceTiles;
  const int blocks_per_sm = kernel.blocks_per_sm;
  const int64_t fewest = (k_tiles + kernel.max_tiles - 1) / kernel.max_tiles;
  const int64_t most_blocks = (n_tiles + kWarps - 1) / kWarps;
  const double partial_bytes = static_cast<double>(kernel.partial_rows) * static_cast<double>(n_tiles) * 16.0 * 4.0;
  const double slice_cost = kSliceGroups + partial_bytes * kPartialTraffic / (kPartialBytesPerUs * kernel.group_us);
  GemvGrid best;
  for (int64_t per = (groups + fewest - 1) / fewest; per >= 1; --per) {
    const int64_t slices = (groups + per - 1) / per;
    if (slices > max_slices) break;
    // Blocks per slice: every count that fills whole rounds of the SMs (up to four waves of
    // resident blocks), and the most the n-tiles allow.
    for (int64_t j = 1; j <= 4 * blocks_per_sm + 1; ++j) {
      const int64_t blocks = j <= 4 * blocks_per_sm ? std::clamp<int64_t>(j * sm_count / slices, 1, most_blocks)
                                                    : most_blocks;
      const int64_t rounds = (n_tiles + blocks * kWarps - 1) / (blocks * kWarps);
      const int64_t per_sm = (blocks * slices + sm_count - 1) / sm_count;
      const int64_t waves = (per_sm + blocks_per_sm - 1) / blocks_per_sm;
      const double concurrent = static_cast<double>(std::min<int64_t>(per_sm, blocks_per_sm));
      const double time =
          static_cast<double>(waves) * (static_cast<double>(rounds * per) + kSetupGroups) *
              std::max(1.0, concurrent / kernel.saturating_blocks) +
          slice_cost * static_cast<double>(slices);
      if (best.slices == 0 || time < best.time * 0.98) {
        best = {per * kSliceTiles, slices, blocks, time};
      }
    }
  }
  return best;
}

GemvGrid plan_linear(int64_t n_tiles, int64_t k_tiles, int64_t m, int bits, Codebook codebook, bool int8, int sm_count,
                     int64_t max_slices) {
  return plan_grid(n_tiles, k_tiles, sm_count, gemv_kernel_shape(m, bits, codebook, int8), max_slices);
}

void split_blocks(int64_t blocks_per_slice, std::span<const int64_t> n_tiles, std::span<int64_t> blocks) {
  int64_t total = 0;
  for (const int64_t t : n_tiles) total += t;
  int64_t assigned = 0;
  for (size_t i = 0; i < n_tiles.size(); ++i) {
    blocks[i] = std::max<int64_t>(1, blocks_per_slice * n_tiles[i] / total);
    assigned += blocks[i];
  }
  for (; assigned < blocks_per_slice; ++assigned) {
    size_t busiest = n_tiles.size();
    double most = 0.0;
    for (size_t i = 0; i < n_tiles.size(); ++i) {
      const double per_block = static_cast<double>(n_tiles[i]) / static_cast<double>(blocks[i]);
      if (blocks[i] * kWarps < n_tiles[i] && per_block > most) {
        most = per_block;
        busiest = i;
      }
    }
    if (busiest == n_tiles.size()) break;
    ++blocks[busiest];
  }
}

}  // namespace exl3::gemv
