// The prefill and decode kernels of paged causal grouped-query attention, one body for every kind
// of cache: templated on a key/value block source (attention.cu: F16 pages copied with cp.async,
// attention_f16_tile.cuh; attention_quant.cu: quantized words dequantized into fp16,
// kv_quant_tile.cuh), which brings each block of 32 keys into shared memory as fp16 tiles for the
// same tensor-core step (attend_block, attention_warp.cuh).
//   - prefill: for tokens that share their sequence with a neighbouring token of the batch (a
//     "run"), one block of Source::kPrefillWarps warps takes 16 consecutive (token, query head)
//     rows per warp of one KV head and loops causally over 32-key blocks of the run's sequence
//     (flash-attention style online softmax); the rows of one KV head share every K/V block
//     brought in (GQA);
//   - decode: for every other token ("single": its neighbours belong to other sequences), one
//     warp per (token, KV head, 16 query heads, key split) walks the split's keys; with several
//     splits the partial max / sum / output go to scratch for the merge (attention_split.h). Its
//     block may hold helper warps that only bring the key blocks in (a Source's
//     kSingleTokenDecodeWarps, for a batch of one token: attention_launch.cuh).
// Each kernel skips the tokens of the other. Every key loop is bounded by the token's position,
// itself checked against max_position and the page table. With a sliding window, keys before
// p - window + 1 are masked (prefill), skipped by the splits that lie wholly before the window
// (decode: no partials written, and the merge starts at the first split inside it), and never
// brought in before the run's earliest window start.
//
// A Source provides kPrefillWarps and
//   template <int D, int kThreads> static Blocks blocks(const AttnArgs&, int32_t seq,
//                                                       int32_t kv_head, int32_t begin, int32_t end);
// the blocks of keys [begin, end) of (seq, kv_head) for the kThreads threads of the CUDA block,
// with blocks(), start(b), load(b), k_tile(), v_tile() and release() (kv_quant_tile::KvBlocks).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/attention_warp.cuh"
#include "kernels/cuda/dependent_launch.cuh"

namespace exl3::attention_detail {

// Normalised fp16 rows out; out0/out1 nullptr for rows not written by this kernel.
template <int D>
__device__ __forceinline__ void store_normalised(const WarpSoftmax<D>& st, __half* out0, __half* out1) {
  float sum[2];
  st.row_sums(sum);
  const float inv0 = sum[0] > 0.0f ? 1.0f / sum[0] : 0.0f;
  const float inv1 = sum[1] > 0.0f ? 1.0f / sum[1] : 0.0f;
  const int c = 2 * (static_cast<int>(threadIdx.x) % 4);
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    if (out0 != nullptr) {
      *reinterpret_cast<__half2*>(out0 + dt * 8 + c) = __floats2half2_rn(st.o[dt][0] * inv0, st.o[dt][1] * inv0);
    }
    if (out1 != nullptr) {
      *reinterpret_cast<__half2*>(out1 + dt * 8 + c) = __floats2half2_rn(st.o[dt][2] * inv1, st.o[dt][3] * inv1);
    }
  }
}

// The warp's rows over every block of `kv`. A warp whose rows all stop before a block
// (warp_limit < its first key) or all start after it (warp_lower past its last key) skips that
// block's math; every thread still takes part in loading it.
template <int D, class Blocks>
__device__ __forceinline__ void attend_blocks(Blocks& kv, const uint32_t (&qf)[D / 16][4], const int32_t (&limit)[2],
                                              const int32_t (&lower)[2], int32_t warp_limit, int32_t warp_lower,
                                              float scale_log2, WarpSoftmax<D>& st) {
  for (int32_t blk = 0; blk < kv.blocks(); ++blk) {
    kv.load(blk);
    const int32_t start = kv.start(blk);
    if (warp_limit >= start && warp_lower < start + kBlockKeys) {
      attend_block<D>(qf, kv.k_tile(), kv.v_tile(), start, limit, lower, scale_log2, st);
    }
    kv.release();
  }
}

template <class Source, int D>
__global__ void __launch_bounds__(Source::kPrefillWarps * 32) attention_prefill_kernel(const AttnArgs a) {
  constexpr int kThreads = Source::kPrefillWarps * 32;
  constexpr int kRows = Source::kPrefillWarps * kWarpRows;  // (token, head) rows per block

  allow_dependents();  // a dependent launch after this one may start its prologue
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y);
  const int64_t total_rows = a.tokens * a.group;
  const int64_t tile_row = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t tile_end = tile_row + kRows < total_rows ? tile_row + kRows : total_rows;
  const int64_t first_token = tile_row / a.group;
  const int64_t last_token = (tile_end - 1) / a.group;

  // This lane's rows g and g+8 of the warp: token and query head, or token -1 past the batch.
  int64_t row_token[2];
  const __half* q_row[2];
  __half* out_row[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t row = tile_row + warp * kWarpRows + lane / 4 + 8 * r;
    row_token[r] = row < total_rows ? row / a.group : -1;
    const int64_t head = kv_head * a.group + (row < total_rows ? row % a.group : 0);
    const int64_t offset = (row_token[r] * a.heads + head) * D;
    q_row[r] = row_token[r] >= 0 ? a.q + offset : nullptr;
    out_row[r] = row_token[r] >= 0 && !is_single(a, row_token[r]) ? a.out + offset : nullptr;
  }
  uint32_t qf[D / 16][4];
  load_q_fragment<D>(qf, q_row[0], q_row[1]);
  WarpSoftmax<D> st;
  st.init();

  // Runs of consecutive same-sequence tokens inside the tile, one causal key loop each; rows of
  // other runs are masked out (limit -1) meanwhile, which leaves their state untouched.
  for (int64_t run_begin = first_token; run_begin <= last_token;) {
    const int32_t seq = a.token_seq[run_begin];
    int64_t run_end = run_begin;  // inclusive
    while (run_end < last_token && a.token_seq[run_end + 1] == seq) ++run_end;
    const bool single = run_end == run_begin && is_single(a, run_begin);
    if (!single) {
      int32_t run_max = 0, run_min_start = a.max_position;
      for (int64_t t = run_begin; t <= run_end; ++t) {
        const int32_t pos = checked_position(a, t);
        run_max = max(run_max, pos);
        run_min_start = min(run_min_start, window_start(a, pos));
      }
      int32_t limit[2], lower[2];
      for (int r = 0; r < 2; ++r) {
        const bool in_run = row_token[r] >= run_begin && row_token[r] <= run_end;
        limit[r] = in_run ? a.positions[row_token[r]] : -1;
        lower[r] = in_run ? window_start(a, limit[r]) : run_max + 1;
      }
      int32_t warp_limit = max(limit[0], limit[1]);
      int32_t warp_lower = min(lower[0], lower[1]);
      for (int offset = 16; offset > 0; offset /= 2) {
        warp_limit = max(warp_limit, __shfl_xor_sync(0xFFFFFFFFu, warp_limit, offset));
        warp_lower = min(warp_lower, __shfl_xor_sync(0xFFFFFFFFu, warp_lower, offset));
      }
      auto kv = Source::template blocks<D, kThreads>(a, seq, kv_head, run_min_start, run_max + 1);
      attend_blocks<D>(kv, qf, limit, lower, warp_limit, warp_lower, a.scale_log2, st);
    }
    run_begin = run_end + 1;
  }
  store_normalised<D>(st, out_row[0], out_row[1]);
}

// kWarps warps a block: warp 0 attends; the others (kWarps > 1) only help bring the blocks in.
template <class Source, int D, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) attention_decode_kernel(const AttnArgs a) {
  constexpr int kThreads = kWarps * 32;
  allow_dependents();  // a dependent launch after this one may start its prologue
  wait_for_prerequisites();  // launched dependent: q and the cache come from the kernels before
  const int64_t t = blockIdx.x;
  if (!is_single(a, t)) return;
  const int64_t head_tiles = (a.group + kWarpRows - 1) / kWarpRows;
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y / head_tiles);
  const int64_t head_tile = blockIdx.y % head_tiles;
  const int32_t split = static_cast<int32_t>(blockIdx.z);
  const int32_t pos = checked_position(a, t);
  const int32_t first_key = window_start(a, pos);
  // Splits past the token's context or wholly before its window hold nothing (the merge knows).
  if (split * a.chunk > pos || split < first_key / a.chunk) return;
  const int32_t begin = max(split * a.chunk, first_key);
  const int32_t end = min(split * a.chunk + a.chunk, pos + 1);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const bool attends = threadIdx.x < 32;  // the helpers' rows are empty

  int64_t head[2];
  const __half* q_row[2];
  int32_t limit[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t in_group = head_tile * kWarpRows + lane / 4 + 8 * r;
    head[r] = attends && in_group < a.group ? kv_head * a.group + in_group : -1;
    q_row[r] = head[r] >= 0 ? a.q + (t * a.heads + head[r]) * D : nullptr;
    limit[r] = head[r] >= 0 ? end - 1 : -1;
  }
  uint32_t qf[D / 16][4];
  load_q_fragment<D>(qf, q_row[0], q_row[1]);
  WarpSoftmax<D> st;
  st.init();
  const int32_t lower[2] = {begin, begin};
  auto kv = Source::template blocks<D, kThreads>(a, a.token_seq[t], kv_head, begin, end);
  attend_blocks<D>(kv, qf, limit, lower, attends ? end - 1 : -1, begin, a.scale_log2, st);
  if (!attends) return;

  if (a.splits == 1) {
    __half* out0 = head[0] >= 0 ? a.out + (t * a.heads + head[0]) * D : nullptr;
    __half* out1 = head[1] >= 0 ? a.out + (t * a.heads + head[1]) * D : nullptr;
    store_normalised<D>(st, out0, out1);
    return;
  }
  float sum[2];
  st.row_sums(sum);
  const int64_t partials = a.tokens * a.heads * a.splits;
  const int c = 2 * (lane % 4);
  for (int r = 0; r < 2; ++r) {
    if (head[r] < 0) continue;
    const int64_t slot = (t * a.heads + head[r]) * a.splits + split;
    if (lane % 4 == 0) {
      a.scratch[2 * slot] = st.m[r];
      a.scratch[2 * slot + 1] = sum[r];
    }
    float* acc = a.scratch + 2 * partials + slot * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<float2*>(acc + dt * 8 + c) = make_float2(st.o[dt][2 * r], st.o[dt][2 * r + 1]);
    }
  }
}

}  // namespace exl3::attention_detail
