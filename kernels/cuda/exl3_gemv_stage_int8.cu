// The int8 few-rows linear's input quantized once, ahead of it (exl3_gemv_int8.cu): x ⊙ suh,
// 128-point Hadamard, fp16, then per 128-input block of a row int8 q with its scale
// (quantize_int8_block), over the whole k, into the kernel's staged layout in scratch; the blocks
// copy their slices. Without it every block of a k-slice quantizes that slice of every row itself,
// work that grows with rows x blocks per slice (8B decode on an H200 with int8 auto, batch 8:
// 2,051 -> 2,294 tokens/s; bench/results/2026-12-05-s11-h200).
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/exl3_gemv_common.cuh"
#include "kernels/cuda/exl3_gemv_int8_quant.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3::gemv {
namespace {

constexpr int kStageWarps = 8;

// Warp (problem, row < m, block) of the grid.
__global__ void __launch_bounds__(kStageWarps* kWarpSize) gemv_stage_int8_kernel(GemvStageArgs a) {
  allow_dependents();
  wait_for_prerequisites();  // x comes from the kernel before
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t job = static_cast<int64_t>(blockIdx.x) * kStageWarps + threadIdx.x / kWarpSize;
  const int64_t k_blocks = a.k / wht128::kBlock;
  if (job >= a.problems * a.m * k_blocks) return;  // uniform over the warp
  const int problem = static_cast<int>(job / (a.m * k_blocks));
  const int row = static_cast<int>(job / k_blocks % a.m);
  const int64_t block = job % k_blocks;
  // Selected field by field: no indexing into the parameter array.
  const GemvStageProblem p = problem == 0 ? a.problem[0] : problem == 1 ? a.problem[1] : a.problem[2];
  float v[wht128::kPerLane];
  linear_input_values(a.x, a.in_features, p.suh, row, block * wht128::kBlock + wht128::kPerLane * lane, v);
  transform_values(v, lane);
  store_int8_block(p.staged, p.sums, a.m, a.k, row, block, lane, v);
}

}  // namespace

// Contract (EXL3_CHECK): 1..kMaxProblems problems, 1 <= m <= kInt8MaxGroups · kInt8GroupRows, k a
// positive multiple of 128, in_features in 1..k; x, every suh, staged (16-byte aligned) and sums
// non-null.
void launch_gemv_stage_int8(const GemvStageArgs& args, cudaStream_t stream) {
  EXL3_CHECK(args.problems >= 1 && args.problems <= kMaxProblems, "int8 gemv stage: ", args.problems, " problems");
  EXL3_CHECK(args.m >= 1 && args.m <= kInt8MaxGroups * kInt8GroupRows, "int8 gemv stage: m ", args.m);
  EXL3_CHECK(args.k > 0 && args.k % wht128::kBlock == 0 && args.in_features >= 1 && args.in_features <= args.k,
             "int8 gemv stage: k ", args.k, " in_features ", args.in_features);
  EXL3_CHECK(args.x != nullptr, "int8 gemv stage: null x");
  for (int i = 0; i < args.problems; ++i) {
    const GemvStageProblem& p = args.problem[i];
    EXL3_CHECK(p.suh != nullptr && p.staged != nullptr && p.sums != nullptr, "int8 gemv stage: problem ", i,
               ": null pointer");
    EXL3_CHECK(reinterpret_cast<uintptr_t>(p.staged) % 16 == 0, "int8 gemv stage: problem ", i,
               ": staged q must be 16-byte aligned");
  }
  const int64_t jobs = args.problems * args.m * (args.k / wht128::kBlock);
  const int64_t blocks = (jobs + kStageWarps - 1) / kStageWarps;
  EXL3_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "int8 gemv stage: too many blocks");
  launch_dependent(gemv_stage_int8_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kStageWarps * kWarpSize), stream,
                   args);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3::gemv
