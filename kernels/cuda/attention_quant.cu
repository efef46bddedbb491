// CUDA paged attention over a quantized KV cache (exl3-format.md §9; K and/or V quantized, each at
// its own width, the other side possibly F16 pages): the device twin of attention_ref for caches
// launch_attention hands over (paged_attention.cuh). The structure of the F16 path (attention.cu),
// with the keys and values of each block of 32 keys dequantized into shared memory as fp16 first
// (kv_quant_tile.cuh: the dequantized values are fp16 by definition, bit-equal to the reference's,
// so nothing is lost) and then fed to the same tensor-core step (attend_block, attention_warp.cuh):
//   - prefill: for tokens that share their sequence with a neighbouring token ("runs"), one block
//     of 8 warps takes 128 consecutive (token, query head) rows of one KV head (every query head
//     of a KV head for 128 / group tokens) and loops causally over the run's keys; the block
//     dequantizes each key once for all its rows;
//   - decode: for every other token, one warp per (token, KV head, 16 query heads, key split)
//     dequantizes and attends to its split's keys only, so a long context spreads over the whole
//     GPU (split-K as attention.cu, with splits down to 32 keys: dequantizing costs more than
//     loading F16 pages); the partials go to the F16 path's scratch and its merge kernel
//     combines them (attention_split.h).
// Never a dequantized copy of the cache: only the current block, with the next block's raw words
// and scales on their way (cp.async) meanwhile. A group of more than 16 query heads per KV head is
// taken 16 heads at a time (decode: 16 per warp; prefill rows span heads freely).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/attention_split.h"
#include "kernels/cuda/attention_warp.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/kv_quant_tile.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {
namespace {

using attention_detail::attend_block;
using attention_detail::kBlockKeys;
using attention_detail::kWarpRows;
using attention_detail::load_q_fragment;
using attention_detail::WarpSoftmax;
using kv_quant_tile::KvBlocks;
using kv_quant_tile::TileSource;

constexpr int kPrefillWarps = 8;
constexpr int kPrefillThreads = kPrefillWarps * 32;
constexpr int kPrefillRows = kPrefillWarps * kWarpRows;  // 128 (token, head) rows per block
constexpr float kLog2e = 1.4426950408889634f;
// Decode splits of at least one block of keys (the F16 path's are two).
constexpr int64_t kMinKeysPerSplit = kBlockKeys;

struct QuantAttnArgs {
  const __half* q;
  __half* out;
  ConstKvSide k, v;
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* page_table;
  float* scratch;  // split-K partials, attention_split.h
  int64_t tokens, num_seqs, max_pages, num_pages, heads, kv_heads, group;
  int32_t page_size, max_position, window;
  float scale_log2;
  int32_t splits, chunk;  // decode: keys [s · chunk, (s + 1) · chunk) go to split s
};

__device__ __forceinline__ int32_t window_start(const QuantAttnArgs& a, int32_t pos) {
  return a.window > 0 ? max(0, pos - a.window + 1) : 0;
}

// A token whose neighbours in the batch belong to other sequences: the decode kernel's.
__device__ __forceinline__ bool is_single(const QuantAttnArgs& a, int64_t t) {
  const int32_t seq = a.token_seq[t];
  return (t == 0 || a.token_seq[t - 1] != seq) && (t + 1 == a.tokens || a.token_seq[t + 1] != seq);
}

// The token's position after checking its metadata against the batch (violations trap).
__device__ __forceinline__ int32_t checked_position(const QuantAttnArgs& a, int64_t t) {
  const int32_t seq = a.token_seq[t];
  const int32_t pos = a.positions[t];
  if (seq < 0 || seq >= a.num_seqs || pos < 0 || pos > a.max_position || pos / a.page_size >= a.max_pages) {
    __trap();
  }
  return pos;
}

__device__ __forceinline__ TileSource tile_source(const QuantAttnArgs& a, int32_t seq, int32_t kv_head) {
  return TileSource{a.k, a.v, a.page_table + seq * a.max_pages, a.kv_heads, a.num_pages, a.page_size, kv_head};
}

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

template <int D>
__global__ void __launch_bounds__(kPrefillThreads) attention_quant_prefill_kernel(const QuantAttnArgs a) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y);
  const int64_t total_rows = a.tokens * a.group;
  const int64_t tile_row = static_cast<int64_t>(blockIdx.x) * kPrefillRows;
  const int64_t tile_end = tile_row + kPrefillRows < total_rows ? tile_row + kPrefillRows : total_rows;
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
      KvBlocks<D, kPrefillThreads> kv(tile_source(a, seq, kv_head), smem, run_min_start, run_max + 1, tid);
      for (int32_t blk = 0; blk < kv.blocks(); ++blk) {
        kv.load(blk);
        // A warp whose rows all end before this block or all start after it skips the math.
        const int32_t start = kv.start(blk);
        if (warp_limit >= start && warp_lower < start + kBlockKeys) {
          attend_block<D>(qf, kv.k_tile(), kv.v_tile(), start, limit, lower, a.scale_log2, st);
        }
        kv.release();
      }
    }
    run_begin = run_end + 1;
  }
  store_normalised<D>(st, out_row[0], out_row[1]);
}

template <int D>
__global__ void __launch_bounds__(32) attention_quant_decode_kernel(const QuantAttnArgs a) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  extern __shared__ __align__(16) unsigned char smem[];
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
  const int lane = static_cast<int>(threadIdx.x);

  int64_t head[2];
  const __half* q_row[2];
  int32_t limit[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t in_group = head_tile * kWarpRows + lane / 4 + 8 * r;
    head[r] = in_group < a.group ? kv_head * a.group + in_group : -1;
    q_row[r] = head[r] >= 0 ? a.q + (t * a.heads + head[r]) * D : nullptr;
    limit[r] = head[r] >= 0 ? end - 1 : -1;
  }
  uint32_t qf[D / 16][4];
  load_q_fragment<D>(qf, q_row[0], q_row[1]);
  WarpSoftmax<D> st;
  st.init();
  const int32_t lower[2] = {begin, begin};
  KvBlocks<D, 32> kv(tile_source(a, a.token_seq[t], kv_head), smem, begin, end, lane);
  for (int32_t blk = 0; blk < kv.blocks(); ++blk) {
    kv.load(blk);
    attend_block<D>(qf, kv.k_tile(), kv.v_tile(), kv.start(blk), limit, lower, a.scale_log2, st);
    kv.release();
  }

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

// A batch of as many sequences as tokens has one token per sequence: every token is single and
// the prefill kernel would only skip them all, so it is not launched.
template <int D>
void launch_for_head_dim(const QuantAttnArgs& args, const AttentionParams& p, const attention_split::SplitPlan& plan,
                         cudaStream_t stream) {
  const int smem = kv_quant_tile::smem_bytes(D, args.k.bits, args.v.bits);
  if (args.tokens > args.num_seqs) {
    const int64_t prefill_tiles = (args.tokens * args.group + kPrefillRows - 1) / kPrefillRows;
    attention_quant_prefill_kernel<D>
        <<<dim3(static_cast<unsigned>(prefill_tiles), static_cast<unsigned>(args.kv_heads)), kPrefillThreads, smem,
           stream>>>(args);
    EXL3_CUDA_CHECK_LAUNCH();
  }
  const int64_t head_tiles = (args.group + kWarpRows - 1) / kWarpRows;
  attention_quant_decode_kernel<D>
      <<<dim3(static_cast<unsigned>(args.tokens), static_cast<unsigned>(args.kv_heads * head_tiles),
              static_cast<unsigned>(args.splits)),
         32, smem, stream>>>(args);
  EXL3_CUDA_CHECK_LAUNCH();
  if (plan.splits > 1) attention_split::launch_attention_merge(p, plan, stream);
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

// Contract: that of launch_attention (paged_attention.cuh) with k_bits, v_bits each 16 (pages F16
// [num_pages, page_size, kv_heads, head_dim], 16-byte aligned) or 2..8 (words I32 [num_pages,
// page_size, kv_heads · head_dim / 32 · bits], 16-byte aligned; scales F16 [num_pages, page_size,
// kv_heads · head_dim / 32], 8-byte aligned); window >= 0; q, out 4-byte aligned. scratch: as
// launch_attention's (attention_scratch_floats), read when a decode token's context is split (the
// plan of attention_split.h with splits of at least 32 keys, decided by max_position, so a step
// graph captured at a bucket's last position serves every position below it). Launches: prefill
// (some sequence has several tokens), decode (grid tokens x kv_heads · ceil(group / 16) x splits,
// one warp each), merge (splits > 1). Dynamic shared memory under 48 KiB; no allocation.
void launch_attention_quant(const AttentionParams& p, cudaStream_t stream) {
  const PagedBatch& b = p.batch;
  EXL3_CHECK(b.tokens >= 0 && b.tokens * std::max<int64_t>(p.heads, 1) <= std::numeric_limits<int32_t>::max(),
             "attention_quant: tokens ", b.tokens, " heads ", p.heads);
  EXL3_CHECK(p.heads > 0 && p.kv_heads > 0 && p.heads % p.kv_heads == 0, "attention_quant: heads ", p.heads,
             " not a multiple of kv_heads ", p.kv_heads);
  EXL3_CHECK(p.head_dim == 64 || p.head_dim == 128, "attention_quant: head_dim ", p.head_dim,
             " unsupported (64 or 128 only)");
  EXL3_CHECK(p.scale > 0.0f, "attention_quant: scale ", p.scale);
  EXL3_CHECK(p.window >= 0 && p.window <= std::numeric_limits<int32_t>::max(), "attention_quant: window ", p.window);
  EXL3_CHECK(p.num_pages > 0 && b.page_size > 0 && b.page_size <= std::numeric_limits<int32_t>::max(),
             "attention_quant: num_pages ", p.num_pages, " page_size ", b.page_size);
  EXL3_CHECK(b.num_seqs > 0 && b.max_pages > 0, "attention_quant: num_seqs ", b.num_seqs, " max_pages ", b.max_pages);
  EXL3_CHECK(b.max_position >= 0 && b.max_position < std::numeric_limits<int32_t>::max(),
             "attention_quant: max_position ", b.max_position);
  const ConstKvSide k{p.k_pages, p.k_words, p.k_scales, p.k_bits};
  const ConstKvSide v{p.v_pages, p.v_words, p.v_scales, p.v_bits};
  for (const ConstKvSide* side : {&k, &v}) {
    const bool full = side->bits == 16 && side->pages != nullptr && aligned(side->pages, 16);
    const bool quantized = side->bits >= 2 && side->bits <= 8 && side->words != nullptr && side->scales != nullptr &&
                           aligned(side->words, 16) && aligned(side->scales, 8);
    EXL3_CHECK(full || quantized, "attention_quant: a side of ", side->bits,
               " bits (16 with 16-byte aligned pages, or 2..8 with 16-byte aligned words and 8-byte aligned scales)");
  }
  const int64_t group = p.heads / p.kv_heads;
  const int64_t head_tiles = (group + kWarpRows - 1) / kWarpRows;
  EXL3_CHECK(p.kv_heads * head_tiles <= 65535, "attention_quant: ", p.heads, " heads over ", p.kv_heads,
             " KV heads exceed the grid");
  if (b.tokens == 0) return;
  EXL3_CHECK(p.q != nullptr && p.out != nullptr, "attention_quant: null q/out");
  EXL3_CHECK(aligned(p.q, 4) && aligned(p.out, 4), "attention_quant: q and out must be 4-byte aligned");
  EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr,
             "attention_quant: null batch metadata");

  const attention_split::SplitPlan plan =
      attention_split::plan_splits(b.tokens, p.heads, b.max_position, kMinKeysPerSplit);
  attention_split::check_split_scratch(p, plan, "attention_quant");
  const QuantAttnArgs args{p.q,
                           p.out,
                           k,
                           v,
                           b.positions,
                           b.token_seq,
                           b.page_table,
                           p.scratch,
                           b.tokens,
                           b.num_seqs,
                           b.max_pages,
                           p.num_pages,
                           p.heads,
                           p.kv_heads,
                           group,
                           static_cast<int32_t>(b.page_size),
                           b.max_position,
                           static_cast<int32_t>(p.window),
                           p.scale * kLog2e,
                           static_cast<int32_t>(plan.splits),
                           static_cast<int32_t>(plan.chunk)};
  if (p.head_dim == 64) {
    launch_for_head_dim<64>(args, p, plan, stream);
  } else {
    launch_for_head_dim<128>(args, p, plan, stream);
  }
}

}  // namespace exl3
