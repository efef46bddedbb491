// Tests of the few-rows EXL3 matmul's launch planner (kernels/cuda/exl3_gemv_plan.h), host code that
// needs no GPU: every plan covers k in whole stages within the kernel's limits, 17-64 rows stage
// longer slices, prestaged rows weigh their partial products, and a grouped launch never gets more
// blocks than its plan.
#include "kernels/cuda/exl3_gemv_plan.h"

#include "kernels/cuda/exl3_gemv_layout.cuh"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>

namespace exl3::gemv {
namespace {

constexpr int kH200Sms = 132;

struct Shape {
  int64_t k;
  int64_t n;
  int64_t m;
  int bits;
};

// The plan covers the k-tiles with slices of whole stages (the last one possibly shorter), each
// within the kernel's slice limit, and its blocks hold every n-tile.
void expect_valid(const GemvGrid& g, const Shape& s, bool int8) {
  const int64_t k_tiles = s.k / 16;
  const GemvKernelShape kernel = gemv_kernel_shape(s.m, s.bits, Codebook::kMul1, int8);
  ASSERT_GT(g.slices, 0) << s.k << "x" << s.n;
  EXPECT_EQ(g.tiles_per_slice % kSliceTiles, 0);
  EXPECT_LE(g.tiles_per_slice, kernel.max_tiles);
  EXPECT_GE(g.slices * g.tiles_per_slice, k_tiles);
  EXPECT_LT((g.slices - 1) * g.tiles_per_slice, k_tiles);
  EXPECT_EQ((k_tiles - (g.slices - 1) * g.tiles_per_slice) % kSliceTiles, 0) << "last slice";
  EXPECT_GE(g.blocks_per_slice, 1);
  EXPECT_LE(g.blocks_per_slice, (s.n / 16 + 7) / 8);
  EXPECT_GT(g.time, 0.0);
}

TEST(Exl3GemvPlan, PlansCoverKInWholeStagesForLlamaShapes) {
  const std::array<Shape, 8> shapes = {{{8192, 28672, 1, 4},
                                        {28672, 8192, 1, 4},
                                        {4096, 28672, 2, 4},
                                        {14336, 4096, 1, 4},
                                        {4096, 128256, 1, 6},
                                        {4096, 6144, 8, 4},
                                        {8192, 8192, 16, 3},
                                        {1152, 4096, 1, 4}}};
  for (const Shape& s : shapes) {
    for (const bool int8 : {false, true}) {
      SCOPED_TRACE(testing::Message() << s.k << "x" << s.n << " m=" << s.m << " K=" << s.bits << " int8=" << int8);
      expect_valid(plan_linear(s.n / 16, s.k / 16, s.m, s.bits, Codebook::kMul1, int8, kH200Sms, 65535), s, int8);
    }
  }
}

TEST(Exl3GemvPlan, LinearsCountEveryResidentBlockTheBareMatmulThree) {
  for (const bool int8 : {false, true}) {
    const GemvKernelShape s = gemv_kernel_shape(1, 4, Codebook::kMul1, int8);
    EXPECT_EQ(s.blocks_per_sm, 4);
    EXPECT_EQ(s.saturating_blocks, 4.0);
  }
  EXPECT_EQ(bare_kernel_shape(1, 4, Codebook::kMul1).saturating_blocks, 3.0);
}

TEST(Exl3GemvPlan, TwoToFourMBlocksStageLongerSlicesInTheSharedMemoryTheirBlocksLeave) {
  // One m-block: rings and staged A in 48 KiB (K=4: 56 tiles a slice at most).
  EXPECT_EQ(gemv_kernel_shape(16, 4, Codebook::kMul1, false).max_tiles, 56);
  // Two m-blocks (32 rows), 3 resident blocks of 74 KiB: 56 tiles instead of the 24 of 48 KiB.
  EXPECT_EQ(gemv_kernel_shape(32, 4, Codebook::kMul1, false).blocks_per_sm, 3);
  EXPECT_EQ(gemv_kernel_shape(32, 4, Codebook::kMul1, false).max_tiles, 56);
  // Four m-blocks (64 rows), 2 resident blocks: 48 tiles instead of the 8 that 48 KiB would hold.
  EXPECT_EQ(gemv_kernel_shape(64, 4, Codebook::kMul1, false).blocks_per_sm, 2);
  EXPECT_EQ(gemv_kernel_shape(64, 4, Codebook::kMul1, false).max_tiles, 48);
  EXPECT_GE(gemv_kernel_shape(48, 8, Codebook::kMul1, false).max_tiles, 32);
}

TEST(Exl3GemvPlan, RespectsTheSliceLimitOfTheScratch) {
  // Scratch for at most 2 slices of partial products: the plan takes the longest slices it may.
  const GemvGrid g = plan_linear(4096 / 16, 4096 / 16, 1, 4, Codebook::kMul1, true, kH200Sms, 4);
  ASSERT_GT(g.slices, 0);
  EXPECT_LE(g.slices, 4);
  // No plan when even the longest slices need more of them than the scratch holds.
  EXPECT_EQ(plan_grid(256, 8192 / 16, kH200Sms, gemv_kernel_shape(1, 4, Codebook::kMul1, true), 4).slices, 0);
}

TEST(Exl3GemvPlan, PrestagedRowsWeighTheirPartialProducts) {
  // The 8B gate/up (1792 n-tiles, k = 4096) at 32 rows: each slice writes 32 x 28672 partial
  // floats, so the plan takes few long slices (5 of 56 tiles measured fastest on the H200).
  const GemvGrid wide = plan_linear(1792, 256, 32, 4, Codebook::kMul1, false, kH200Sms, 65535);
  ASSERT_GT(wide.slices, 0);
  EXPECT_LE(wide.slices, 8);
  expect_valid(wide, {4096, 28672, 32, 4}, false);
  // Below kGemvPricedPartialMinRows the partials are not priced: 1 row keeps its measured plan (16
  // slices of 16 tiles, 33 blocks a slice).
  const GemvGrid one = plan_linear(1792, 256, 1, 4, Codebook::kMul1, false, kH200Sms, 65535);
  EXPECT_EQ(one.slices, 16);
  EXPECT_EQ(one.blocks_per_slice, 33);
  EXPECT_EQ(gemv_kernel_shape(1, 4, Codebook::kMul1, false).partial_rows, 0);
  EXPECT_EQ(gemv_kernel_shape(32, 4, Codebook::kMul1, false).partial_rows, 32);
  // 6-7 rows are prestaged but keep the unpriced plans (measured faster); so does the int8 kernel
  // up to one group of 8 rows, prestaged from 5.
  EXPECT_EQ(gemv_kernel_shape(kGemvPricedPartialMinRows - 1, 4, Codebook::kMul1, false).partial_rows, 0);
  EXPECT_EQ(gemv_kernel_shape(kGemvPricedPartialMinRows, 4, Codebook::kMul1, false).partial_rows,
            kGemvPricedPartialMinRows);
  EXPECT_EQ(gemv_kernel_shape(kInt8GroupRows, 4, Codebook::kMul1, true).partial_rows, 0);
  EXPECT_EQ(gemv_kernel_shape(kInt8GroupRows + 1, 4, Codebook::kMul1, true).partial_rows, kInt8GroupRows + 1);
}

TEST(Exl3GemvPlan, GroupedBlocksNeverPassThePlan) {
  // Gate and up of the Llama-3.1-8B MLP (896 n-tiles each) sharing 33 blocks a slice: 16 + 17,
  // not 17 + 17 (16 slices x 34 blocks would pass a full wave of 528 on an H200).
  const std::array<int64_t, 2> gate_up = {896, 896};
  std::array<int64_t, 2> blocks{};
  split_blocks(33, gate_up, blocks);
  EXPECT_EQ(blocks[0] + blocks[1], 33);
  EXPECT_GE(blocks[0], 16);
  EXPECT_GE(blocks[1], 16);
  // q, k, v of the 8B (256, 64, 64 n-tiles) over 48 blocks: in proportion, every problem at least one.
  const std::array<int64_t, 3> qkv = {256, 64, 64};
  std::array<int64_t, 3> qkv_blocks{};
  split_blocks(48, qkv, qkv_blocks);
  EXPECT_EQ(qkv_blocks[0] + qkv_blocks[1] + qkv_blocks[2], 48);
  EXPECT_EQ(qkv_blocks[0], 32);
  EXPECT_EQ(qkv_blocks[1], 8);
  EXPECT_EQ(qkv_blocks[2], 8);
  // A problem whose blocks already give every n-tile a warp takes no more.
  const std::array<int64_t, 2> small = {8, 800};
  std::array<int64_t, 2> small_blocks{};
  split_blocks(40, small, small_blocks);
  EXPECT_EQ(small_blocks[0], 1);
  EXPECT_EQ(small_blocks[1], 39);
}

}  // namespace
}  // namespace exl3::gemv
