// The few-rows EXL3 matmul's launch planner (exl3_gemv_plan.h).
#include "kernels/cuda/exl3_gemv_plan.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/exl3_gemv_layout.cuh"

namespace exl3::gemv {
namespace {

constexpr double kSetupGroups = 1.5;
constexpr double kSliceGroups = 0.05;
constexpr double kSaturatingBlocks = 3.0;  // blocks (24 warps) that keep an SM's issue slots busy

}  // namespace

// m-blocks of 16 rows the kernel instance for m runs, and its resident blocks per SM.
int m_blocks(int64_t m) { return static_cast<int>((m + 15) / 16); }
bool doubled(Codebook codebook, int64_t m) { return codebook != Codebook::kMul1 && m_blocks(m) == 1; }
int resident_blocks(int64_t m) { return blocks_per_sm(m_blocks(m)); }

int slice_tile_limit(int64_t m, int bits, Codebook codebook, bool int8) {
  return int8 ? max_tiles_per_slice_int8(bits, static_cast<int>(m)) : max_tiles_per_slice(bits, m_blocks(m), doubled(codebook, m));
}

int resident_blocks(int64_t m, int bits, bool int8) {
  if (!int8) return resident_blocks(m);
  // Registers (the launch bounds) or shared memory (an SM's 227 KiB, 1 KiB of it reserved per block).
  const int words = int8_smem_words(bits, static_cast<int>(m), max_tiles_per_slice_int8(bits, static_cast<int>(m)));
  const int by_smem = (227 * 1024) / (words * 4 + 1024);
  return std::max(1, std::min(int8_blocks_per_sm(int8_groups_of(static_cast<int>(m))), by_smem));
}


GemvGrid plan_grid(int64_t n_tiles, int64_t k_tiles, int sm_count, int blocks_per_sm, int64_t max_slices,
                   int max_tiles) {
  const int64_t groups = k_tiles / kSliceTiles;
  const int64_t fewest = (k_tiles + max_tiles - 1) / max_tiles;
  const int64_t most_blocks = (n_tiles + kWarps - 1) / kWarps;
  GemvGrid best;
  double best_time = 0.0;
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
      const double saturating = std::min<double>(kSaturatingBlocks, blocks_per_sm);
      const double concurrent = static_cast<double>(std::min<int64_t>(per_sm, blocks_per_sm));
      const double time = static_cast<double>(waves) * (static_cast<double>(rounds * per) + kSetupGroups) *
                              std::max(1.0, concurrent / saturating) +
                          kSliceGroups * static_cast<double>(slices);
      if (best.slices == 0 || time < best_time * 0.98) {
        best_time = time;
        best = {per * kSliceTiles, slices, blocks};
      }
    }
  }
  return best;
}

}  // namespace exl3::gemv
