// The output transform of the few-rows EXL3 linears (exl3_gemv.cuh): for every (row, 128-block)
// output, 1-8 warps sum the k-slices' partial products (taking the slices in turn), and the first
// of them applies the 128-point Hadamard transform, ⊙ svh, + bias, and stores, adds into a
// residual, combines gate and up into silu(gate) · up, or rotates q and k and writes the KV cache —
// each exactly as the unfused ops would (launch_exl3_output_transform, add, silu_mul,
// launch_rope_kv_write), so fusing changes no result. A gated product may also stage the input of
// the linear that reads it (GemvInputHandoff), as its staging launch would. Few outputs (few
// rows) spread each over 8 warps; many (32 rows) take one warp each, 8 to a block.
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_gemv_common.cuh"
#include "kernels/cuda/exl3_gemv_output_common.cuh"
#include "kernels/cuda/exl3_wht128.cuh"
#include "kernels/cuda/paged_cache_slots.cuh"
#include "kernels/cuda/rope_rotation.cuh"

namespace exl3 {
namespace {

using namespace gemv_output;  // NOLINT: the pass's shared steps

constexpr int kWarpSize = 32;
constexpr int kWarps = 8;  // a block's; an output's `groups` warps sum its slices g, g + groups, ...
constexpr int kThreads = kWarps * kWarpSize;
constexpr int64_t kBlock = wht128::kBlock;
static_assert(kGemvRopeHeadDim == kBlock, "a rotated head is one output block");
// Warps a launch aims for: outputs take fewer warps each once there are this many of them.
constexpr int64_t kTargetWarps = 4096;

// kRopeKvWrite (exl3_gemv.cuh): the lane's 4 values v (columns 4·lane .. 4·lane + 3 of head `head`
// of `row`, output `which`: 0 q, 1 k, 2 v) rounded to fp16, q and k rotated, stored into y and, k
// and v, into the token's cache slot (page: CacheSlots::page_of's; metadata outside the cache
// traps, as launch_rope_kv_write). A head's pair (d, d + 64) sits in lanes l and l + 16 (same
// element), exchanged by one shuffle. freq: inv_freq of the lane's 4 pair indices (read before the
// wait). Every lane of the warp.
__device__ __forceinline__ void rope_kv_store(const GemvRopeKv& r, int which, const GemvOutput& o, int64_t row,
                                              int64_t head, int32_t pos, int32_t page, int lane,
                                              const float (&freq)[wht128::kPerLane],
                                              const float (&v)[wht128::kPerLane]) {
  __half out[wht128::kPerLane];
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const float x = __half2float(__float2half_rn(v[e]));  // the linear's output
    const float partner = __shfl_xor_sync(0xFFFFFFFFu, x, 16);
    if (which == 2) {
      out[e] = __float2half_rn(x);
      continue;
    }
    float c, s;
    rope_rotation::scaled_cos_sin(static_cast<float>(pos), freq[e], r.attention_scaling, c, s);
    __half r1, r2;
    if (lane < 16) {
      rope_rotation::rotate_pair(x, partner, c, s, r1, r2);
      out[e] = r1;
    } else {
      rope_rotation::rotate_pair(partner, x, c, s, r1, r2);
      out[e] = r2;
    }
  }
  const int64_t col0 = head * kGemvRopeHeadDim + wht128::kPerLane * lane;
  __half* y = static_cast<__half*>(o.y) + row * o.n + col0;
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) y[e] = out[e];
  if (which == 0) return;
  __half* slot =
      (which == 1 ? r.k_pages : r.v_pages) + cache_slots(r.batch, r.num_pages).row_in(page, pos) * o.n + col0;
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) slot[e] = out[e];
}

static_assert(kGemvInputHandoffMaxRows < gemv::kInt8PrestageMinRows,
              "the hand-off serves the rows no launch prestages");

// kWarps / groups outputs (row, 128-column block) per block: an output's `groups` warps sum the
// slices in parallel, the first of them adds their sums (in a fixed order) and finishes. `outputs`:
// the launch's total (warps past it only reach the barrier). kRope: the kRopeKvWrite epilogue, and
// kStageNext: kSiluMul with an input hand-off (args.next_input), each an instance of its own, so
// that the other epilogues' code is what it was without them.
template <bool kRope, bool kStageNext>
__global__ void __launch_bounds__(kThreads) gemv_output_kernel(GemvOutputArgs args, int groups, int64_t outputs) {
  allow_dependents();
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int group = warp % groups;
  const int64_t output = static_cast<int64_t>(blockIdx.x) * (kWarps / groups) + warp / groups;
  const bool active = output < outputs;  // uniform over the warp
  // The output this warp belongs to (kSiluMul: the gate's blocks, with up alongside).
  int64_t block = active ? output : 0;
  int which = 0;
  const int searched = args.epilogue == GemvEpilogue::kSiluMul ? 1 : args.outputs;
  for (; which < searched - 1; ++which) {
    const int64_t blocks = args.m * (args.output[which].n / kBlock);
    if (block < blocks) break;
    block -= blocks;
  }
  const GemvOutput o = which == 0 ? args.output[0] : which == 1 ? args.output[1] : args.output[2];
  const int64_t blocks_per_row = o.n / kBlock;
  const int64_t row = block / blocks_per_row;
  const int64_t col0 = (block % blocks_per_row) * kBlock + wht128::kPerLane * lane;
  const bool silu = args.epilogue == GemvEpilogue::kSiluMul;
  ColumnScales scales{};
  ColumnScales up_scales{};
  float freq[wht128::kPerLane] = {};
  __half next_suh[wht128::kPerLane] = {};
  if (active && group == 0) {
    scales = column_scales(o, col0);
    if (silu) up_scales = column_scales(args.output[1], col0);
    if constexpr (kStageNext) {
#pragma unroll
      for (int e = 0; e < wht128::kPerLane; ++e) next_suh[e] = args.next_input.suh[col0 + e];
    }
    if constexpr (kRope) {
      if (which < 2) {
#pragma unroll
        for (int e = 0; e < wht128::kPerLane; ++e)
          freq[e] = args.rope.inv_freq[(wht128::kPerLane * lane + e) % (kGemvRopeHeadDim / 2)];
      }
    }
  }
  wait_for_prerequisites();
  // The token's position and sequence (written by earlier kernels of the step), in flight with the
  // partial products.
  int32_t pos = 0;
  int32_t seq = 0;
  if (kRope && active && group == 0) {
    pos = args.rope.batch.positions[row];
    seq = which > 0 ? args.rope.batch.token_seq[row] : 0;
  }

  __shared__ float4 part[2][kWarps][kWarpSize];
  if (active) {
    part[0][warp][lane] = slice_sum(o, args.m, args.slices, row, col0, group, groups);
    if (silu) part[1][warp][lane] = slice_sum(args.output[1], args.m, args.slices, row, col0, group, groups);
  }
  // The page of a key or value slot: its load in flight through the barrier and the transform.
  int32_t page = 0;
  if (kRope && active && group == 0 && which > 0)
    page = cache_slots(args.rope.batch, args.rope.num_pages).page_of(seq, pos);
  __syncthreads();
  if (!active || group != 0) return;

  float v[wht128::kPerLane];
  sum_of_groups(part[0], warp, lane, groups, v);
  finish(o, scales, col0, lane, v);
  if constexpr (kRope) {
    rope_kv_store(args.rope, which, o, row, block % blocks_per_row, pos, page, lane, freq, v);
    return;
  }
  if (silu) {
    float u[wht128::kPerLane];
    sum_of_groups(part[1], warp, lane, groups, u);
    finish(args.output[1], up_scales, col0, lane, u);
    auto* act = static_cast<__half*>(o.y);
    __half a[wht128::kPerLane];
#pragma unroll
    for (int e = 0; e < wht128::kPerLane; ++e) {
      const int64_t col = col0 + e;
      a[e] = __float2half_rn(0.0f);
      if (col >= o.out_features) continue;
      const float g = __half2float(__float2half_rn(v[e]));
      const float up = __half2float(__float2half_rn(u[e]));
      a[e] = __float2half_rn(g / (1.0f + expf(-g)) * up);
      act[row * o.out_features + col] = a[e];
    }
    if constexpr (kStageNext) {  // int8 only (launch_gemv_output checks the layout)
      const GemvInputHandoff& h = args.next_input;
      stage_input_block<true, false>(h.layout, h.staged, args.m, o.n, row, block % blocks_per_row, lane, a, next_suh);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int64_t col = col0 + e;
    if (col >= o.out_features) continue;
    const int64_t at = row * o.out_features + col;
    if (args.epilogue == GemvEpilogue::kAddResidual) {
      static_cast<float*>(o.y)[at] += v[e];
    } else if (o.y_f32) {
      static_cast<float*>(o.y)[at] = v[e];
    } else {
      static_cast<__half*>(o.y)[at] = __float2half_rn(v[e]);
    }
  }
}

}  // namespace

// Contract (EXL3_CHECK): 1..3 outputs, m >= 1, slices >= 1, every n a positive multiple of 128 and
// out_features in 1..n; kAddResidual: every y F32; kSiluMul: 2 outputs of equal n and
// out_features, the first's y F16 (the second's y unused). Pointers device, c 16-byte aligned.
void launch_gemv_output(const GemvOutputArgs& args, cudaStream_t stream) {
  EXL3_CHECK(args.outputs >= 1 && args.outputs <= 3 && args.m >= 1 && args.slices >= 1, "gemv output: ",
             args.outputs, " outputs, m ", args.m, ", ", args.slices, " slices");
  int64_t blocks = 0;
  for (int i = 0; i < args.outputs; ++i) {
    const GemvOutput& o = args.output[i];
    EXL3_CHECK(o.n > 0 && o.n % kBlock == 0 && o.out_features >= 1 && o.out_features <= o.n, "gemv output ", i,
               ": n ", o.n, ", out_features ", o.out_features);
    EXL3_CHECK(o.c != nullptr && o.svh != nullptr && o.y != nullptr, "gemv output ", i, ": null pointer");
    EXL3_CHECK(reinterpret_cast<uintptr_t>(o.c) % 16 == 0, "gemv output ", i, ": partials must be 16-byte aligned");
    EXL3_CHECK(args.epilogue != GemvEpilogue::kAddResidual || o.y_f32, "gemv output ", i,
               ": the residual must be F32");
    if (args.epilogue != GemvEpilogue::kSiluMul || i == 0) blocks += args.m * (o.n / kBlock);
  }
  if (args.epilogue == GemvEpilogue::kRopeKvWrite) {
    const GemvRopeKv& r = args.rope;
    EXL3_CHECK(args.outputs == 3 && args.output[1].n == args.output[2].n, "gemv output: rope/cache takes q, k, v");
    for (int i = 0; i < 3; ++i) {
      EXL3_CHECK(!args.output[i].y_f32 && args.output[i].out_features == args.output[i].n, "gemv output ", i,
                 ": rope/cache takes F16 outputs of whole heads");
    }
    const PagedBatch& b = r.batch;
    EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr && r.inv_freq != nullptr &&
                   r.k_pages != nullptr && r.v_pages != nullptr,
               "gemv output: rope/cache null pointer");
    EXL3_CHECK(b.tokens == args.m && b.num_seqs > 0 && b.max_pages > 0 && b.page_size > 0 && r.num_pages > 0,
               "gemv output: rope/cache of ", b.tokens, " tokens for ", args.m, " rows, ", b.num_seqs, " sequences, ",
               b.max_pages, " pages each, ", b.page_size, " a page, ", r.num_pages, " pages");
  }
  if (args.epilogue == GemvEpilogue::kSiluMul) {
    EXL3_CHECK(args.outputs == 2 && args.output[0].n == args.output[1].n &&
                   args.output[0].out_features == args.output[1].out_features && !args.output[0].y_f32,
               "gemv output: silu-mul takes gate and up of one width and an F16 output");
  }
  if (args.input_handoff) {
    const GemvInputHandoff& h = args.next_input;
    EXL3_CHECK(args.epilogue == GemvEpilogue::kSiluMul && h.suh != nullptr && h.staged != nullptr,
               "gemv output: an input hand-off follows a gated product, with the consumer's suh and staging");
    EXL3_CHECK(reinterpret_cast<uintptr_t>(h.staged) % 16 == 0, "gemv output: staged input must be 16-byte aligned");
    EXL3_CHECK(h.layout.int8 && args.m * args.output[0].n <= h.layout.staged_words,
               "gemv output: an input hand-off takes the int8 layout of ", args.m, " rows");
  }
  if (args.norm_handoff) {
    launch_gemv_output_norm(args, stream);
    return;
  }
  // Warps per output: as many as the slices use (up to a block's 8), fewer where the outputs alone
  // fill kTargetWarps.
  int groups = kWarps;
  while (groups > 1 && (groups > args.slices || blocks * groups > kTargetWarps)) groups /= 2;
  const int64_t per_block = kWarps / groups;
  const int64_t grid = (blocks + per_block - 1) / per_block;
  EXL3_CHECK(grid <= std::numeric_limits<int32_t>::max(), "gemv output: too many blocks");
  const dim3 grid3(static_cast<unsigned>(grid));
  if (args.epilogue == GemvEpilogue::kRopeKvWrite) {
    launch_dependent(gemv_output_kernel<true, false>, grid3, dim3(kThreads), stream, args, groups, blocks);
  } else if (args.input_handoff) {
    launch_dependent(gemv_output_kernel<false, true>, grid3, dim3(kThreads), stream, args, groups, blocks);
  } else {
    launch_dependent(gemv_output_kernel<false, false>, grid3, dim3(kThreads), stream, args, groups, blocks);
  }
}

}  // namespace exl3
