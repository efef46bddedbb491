// The launch plan of the few-rows EXL3 matmul (exl3_gemv.cu, exl3_gemv_int8.cu): how many k-slices
// and blocks a shape gets on this GPU. Host code only.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/ops.h"

namespace exl3::gemv {

// m-blocks of 16 rows the fp16 kernel instance for m runs.
int m_blocks(int64_t m);

// What the planner knows of one kernel instance: the blocks an SM holds at once and how many of
// them already keep its issue slots busy; the most k-tiles a slice may hold (slices are whole
// groups of kSliceTiles, a stage of either kernel); the rows whose partial products every slice
// writes (0: the slices add into C instead) and the time of one group of kSliceTiles tiles per warp
// (microseconds), which turns those bytes into groups.
struct GemvKernelShape {
  int blocks_per_sm = 1;
  double saturating_blocks = 1.0;
  int max_tiles = 0;
  int partial_rows = 0;
  double group_us = 1.0;
};

// The launch shape: k-slices of tiles_per_slice tiles (whole groups, at most max_tiles, at most
// max_slices slices) and blocks per slice, whose warps share the slice's n-tiles; the model's time
// (in groups of kSliceTiles tiles). A block's work is its warps' rounds of n-tiles times the slice
// length, plus a fixed setup (staging A, filling the pipeline: kSetupGroups groups). An SM holds
// blocks_per_sm blocks at once (more take further waves) and runs up to saturating_blocks of them
// at full speed each; beyond that they share its issue rate, so a wave takes a block's work times
// max(1, its blocks / saturating_blocks). Every slice adds kSliceGroups and the traffic of its
// partial products (partial_rows x n floats written, then read by the output pass, at the memory
// rate, in groups of group_us). The plan minimises the busiest SM's time (whole multiples of the SM
// count, no nearly idle last wave). slices == 0: no plan fits max_slices.
struct GemvGrid {
  int64_t tiles_per_slice = 0;
  int64_t slices = 0;
  int64_t blocks_per_slice = 0;
  double time = 0.0;
};

GemvGrid plan_grid(int64_t n_tiles, int64_t k_tiles, int sm_count, const GemvKernelShape& kernel, int64_t max_slices);

// The kernel a linear of m rows runs (int8: exl3_gemv_int8.cu, else exl3_gemv.cu).
GemvKernelShape gemv_kernel_shape(int64_t m, int bits, Codebook codebook, bool int8);
// The bare fp16 matmul (launch_exl3_gemv: slices add into C with atomics).
GemvKernelShape bare_kernel_shape(int64_t m, int bits, Codebook codebook);

// The few-rows linear's plan.
GemvGrid plan_linear(int64_t n_tiles, int64_t k_tiles, int64_t m, int bits, Codebook codebook, bool int8, int sm_count,
                     int64_t max_slices);

// A grouped launch's blocks per slice shared by its problems (n_tiles each): in proportion to the
// n-tiles, rounded down (at least one each), then the rest of the plan's blocks one at a time to
// the problem with the most n-tiles per block (none to a problem whose blocks already have a warp
// per n-tile). Rounding each share up would pass the plan's count, and one block past a full wave
// of resident blocks costs a second wave.
void split_blocks(int64_t blocks_per_slice, std::span<const int64_t> n_tiles, std::span<int64_t> blocks);

}  // namespace exl3::gemv
