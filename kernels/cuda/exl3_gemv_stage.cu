// The input transform of the fp16 few-rows linear (exl3_gemv.cu) done once, ahead of it: x ⊙ suh,
// 128-point Hadamard, fp16, straight into the kernel's staged layout over the whole k (and, for
// MUL1, every row's sums per 128 inputs). Without it each block of a k-slice transforms that slice
// of every row itself: at 32 rows that redundant work was 25-82% of the matmul's warp samples
// (Nsight Compute, the 8B decode at batch 32 on an H200); with it a block copies its slice.
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/exl3_gemv_common.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3::gemv {
namespace {

constexpr int kStageWarps = 8;

// Warp (problem, row, block) of the grid: row < 16 · m_blocks; rows >= m stage zeros.
template <bool kDoubled>
__global__ void __launch_bounds__(kStageWarps * kWarpSize) gemv_stage_kernel(GemvStageArgs a) {
  allow_dependents();
  wait_for_prerequisites();  // x comes from the kernel before
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t job = static_cast<int64_t>(blockIdx.x) * kStageWarps + threadIdx.x / kWarpSize;
  const int64_t k_blocks = a.k / wht128::kBlock;
  const int rows = 16 * a.m_blocks;
  if (job >= a.problems * rows * k_blocks) return;  // uniform over the warp
  const int problem = static_cast<int>(job / (rows * k_blocks));
  const int row = static_cast<int>(job / k_blocks % rows);
  const int64_t block = job % k_blocks;
  // Selected field by field: no indexing into the parameter array.
  const GemvStageProblem p = problem == 0 ? a.problem[0] : problem == 1 ? a.problem[1] : a.problem[2];
  const int kk0 = wht128::kPerLane * lane;  // within the block
  float v[wht128::kPerLane] = {};
  if (row < a.m) {  // uniform over the warp
    linear_input_values(a.x, a.in_features, p.suh, row, block * wht128::kBlock + kk0, v);
    transform_values(v, lane);
  }
  store_staged_block<kDoubled>(p.staged, a.row_sums && row < a.m ? p.sums : nullptr, a.k, row, block, lane, v);
}

}  // namespace

// Contract (EXL3_CHECK): 1..kMaxProblems problems, 1 <= m <= 16 · m_blocks, m_blocks 1..4, k a
// positive multiple of 128, in_features in 1..k; x, every suh and staged non-null (staged 16-byte
// aligned), sums non-null with row_sums.
void launch_gemv_stage(const GemvStageArgs& args, cudaStream_t stream) {
  EXL3_CHECK(args.problems >= 1 && args.problems <= kMaxProblems, "gemv stage: ", args.problems, " problems");
  EXL3_CHECK(args.m_blocks >= 1 && args.m_blocks <= 4 && args.m >= 1 && args.m <= 16 * args.m_blocks,
             "gemv stage: m ", args.m, " in ", args.m_blocks, " m-blocks");
  EXL3_CHECK(args.k > 0 && args.k % wht128::kBlock == 0 && args.in_features >= 1 && args.in_features <= args.k,
             "gemv stage: k ", args.k, " in_features ", args.in_features);
  EXL3_CHECK(args.x != nullptr, "gemv stage: null x");
  for (int i = 0; i < args.problems; ++i) {
    const GemvStageProblem& p = args.problem[i];
    EXL3_CHECK(p.suh != nullptr && p.staged != nullptr && (!args.row_sums || p.sums != nullptr), "gemv stage: problem ",
               i, ": null pointer");
    EXL3_CHECK(reinterpret_cast<uintptr_t>(p.staged) % 16 == 0, "gemv stage: problem ", i,
               ": staged A must be 16-byte aligned");
  }
  const int64_t jobs = args.problems * 16 * args.m_blocks * (args.k / wht128::kBlock);
  const int64_t blocks = (jobs + kStageWarps - 1) / kStageWarps;
  EXL3_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "gemv stage: too many blocks");
  const dim3 grid(static_cast<unsigned>(blocks));
  if (args.doubled) {
    launch_dependent(gemv_stage_kernel<true>, grid, dim3(kStageWarps * kWarpSize), stream, args);
  } else {
    launch_dependent(gemv_stage_kernel<false>, grid, dim3(kStageWarps * kWarpSize), stream, args);
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3::gemv
