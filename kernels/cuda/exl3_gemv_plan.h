// The launch plan of the few-rows EXL3 matmul (exl3_gemv.cu): how many k-slices and blocks a
// shape gets on this GPU. Host code only.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace exl3::gemv {

// m-blocks of 16 rows the kernel instance for m runs, whether 3INST/MCG take the doubled k, and
// the kernel's resident blocks per SM.
int m_blocks(int64_t m);
bool doubled(Codebook codebook, int64_t m);
int resident_blocks(int64_t m);

// The kernel a linear of m rows runs (int8: exl3_gemv_int8.cu, else exl3_gemv.cu): the most
// k-tiles a slice may hold and its resident blocks per SM.
int slice_tile_limit(int64_t m, int bits, Codebook codebook, bool int8);
int resident_blocks(int64_t m, int bits, bool int8);

// The launch shape: k-slices of tiles_per_slice tiles (whole kSliceTiles groups, at most
// max_tiles, at most max_slices slices) and blocks per slice, whose warps share the slice's
// n-tiles. A block's work is its warps' rounds of n-tiles times the slice length plus a fixed setup
// (staging A, filling the pipeline) worth about kSetupGroups groups of tiles. An SM holds
// blocks_per_sm blocks at once (more take further waves) and runs up to kSaturatingBlocks of them
// at full speed each; beyond that they share its issue rate, so a wave takes a block's work times
// max(1, its blocks / kSaturatingBlocks). The output pass adds kSliceGroups a slice. The plan
// minimises the busiest SM's time (whole multiples of the SM count, no nearly idle last wave).
struct GemvGrid {
  int64_t tiles_per_slice = 0;
  int64_t slices = 0;
  int64_t blocks_per_slice = 0;
};

GemvGrid plan_grid(int64_t n_tiles, int64_t k_tiles, int sm_count, int blocks_per_sm, int64_t max_slices,
                   int max_tiles);

}  // namespace exl3::gemv
