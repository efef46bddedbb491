// The steps every output pass of the few-rows EXL3 linears shares (exl3_gemv_output.cu,
// exl3_gemv_output_norm.cu): summing an output's k-slice partial products, finishing a 128-column
// block (Hadamard, ⊙ svh, + bias), as launch_exl3_output_transform does, and staging a block of
// the next linear's input (the hand-offs).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_gemv_common.cuh"
#include "kernels/cuda/exl3_gemv_int8_quant.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3::gemv_output {

// Σ slices of the lane's 4 columns col0 .. col0 + 3 of `row`, over this warp's share of the slices
// (several loads in flight: the partials sit in L2, and one at a time would pay its latency once
// per slice), each read as its last use (they were stored under evict-last).
__device__ __forceinline__ float4 slice_sum(const GemvOutput& o, int64_t m, int64_t slices, int64_t row, int64_t col0,
                                            int group, int groups) {
  constexpr int kInFlight = 4;
  const float* c = o.c + row * o.n + col0;
  const int64_t stride = m * o.n;
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t s0 = group; s0 < slices; s0 += kInFlight * groups) {
    float4 part[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int64_t s = s0 + int64_t{i} * groups;
      part[i] = s < slices ? __ldlu(reinterpret_cast<const float4*>(c + s * stride))
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      sum.x += part[i].x;
      sum.y += part[i].y;
      sum.z += part[i].z;
      sum.w += part[i].w;
    }
  }
  return sum;
}

// The lane's svh and bias (0 where there is none) of columns col0 .. col0 + 3: constants of the
// model, read before the kernels this one depends on have finished.
struct ColumnScales {
  float svh[wht128::kPerLane];
  float bias[wht128::kPerLane];
};

__device__ __forceinline__ ColumnScales column_scales(const GemvOutput& o, int64_t col0) {
  ColumnScales s;
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int64_t col = col0 + e;
    s.svh[e] = __half2float(o.svh[col]);
    s.bias[e] = o.bias != nullptr && col < o.out_features ? o.bias[col] : 0.0f;
  }
  return s;
}

// An output's column sums from its `groups` warps' slice sums (part[warp .. warp + groups - 1]
// [lane], in that order) into the lane's 4 values.
__device__ __forceinline__ void sum_of_groups(const float4 (*part)[32], int warp, int lane, int groups,
                                              float (&v)[wht128::kPerLane]) {
  float4 t = part[warp][lane];
  for (int g = 1; g < groups; ++g) {
    t.x += part[warp + g][lane].x;
    t.y += part[warp + g][lane].y;
    t.z += part[warp + g][lane].z;
    t.w += part[warp + g][lane].w;
  }
  v[0] = t.x;
  v[1] = t.y;
  v[2] = t.z;
  v[3] = t.w;
}

// v: the summed column values in; Hadamard, scale, ⊙ svh, + bias out.
__device__ __forceinline__ void finish(const GemvOutput& o, const ColumnScales& s, int64_t col0, int lane,
                                       float (&v)[wht128::kPerLane]) {
  wht128::transform(v, lane);
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    float out = v[e] * wht128::kScale * s.svh[e];
    if (o.bias != nullptr && col0 + e < o.out_features) out += s.bias[e];
    v[e] = out;
  }
}

// A hand-off's staging of the next linear's input: the lane's 4 fp16 inputs x (of `row`, 128-input
// block `block` of k) ⊙ that linear's suh, Hadamard, stored in its staged layout (`staged`: the
// words, then `layout`'s side tables) as launch_gemv_stage / launch_gemv_stage_int8 would: int8 q
// and its scales (kInt8), or fp16 A (kDoubled: the doubled layout) with MUL1's row sums where the
// layout keeps them. Every lane of the warp.
template <bool kInt8, bool kDoubled>
__device__ __forceinline__ void stage_input_block(const GemvStagedLayout& layout, uint32_t* staged, int64_t m,
                                                  int64_t k, int64_t row, int64_t block, int lane,
                                                  const __half (&x)[wht128::kPerLane],
                                                  const __half (&suh)[wht128::kPerLane]) {
  float v[wht128::kPerLane];
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) v[e] = __half2float(__hmul(x[e], suh[e]));
  gemv::transform_values(v, lane);
  float* sides = reinterpret_cast<float*>(staged + layout.staged_words);
  if constexpr (kInt8) {
    gemv::store_int8_block(staged, sides, m, k, static_cast<int>(row), block, lane, v);
  } else {
    gemv::store_staged_block<kDoubled>(staged, layout.row_sums ? sides : nullptr, k, static_cast<int>(row), block,
                                       lane, v);
  }
}

}  // namespace exl3::gemv_output
