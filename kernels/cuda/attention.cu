// CUDA paged causal grouped-query attention: the device twin of attention_ref over a batch
// (kernels/cuda/paged_attention.cuh). Tensor cores (mma.sync m16n8k16, fp16 in, fp32 softmax and
// accumulation) through the warp pieces of attention_warp.cuh. Three kernels, launched in this
// order on the stream (prefill only when some sequence has several tokens, merge only with splits):
//   - prefill: for tokens that share their sequence with a neighbouring token of the batch (a
//     "run"), one block of 4 warps takes 64 consecutive (token, query head) rows of one KV head
//     and loops causally over 32-key blocks of the run's sequence (flash-attention style online
//     softmax); the rows of one KV head share every K/V block loaded (GQA);
//   - decode: for every other token ("single": its neighbours belong to other sequences), one
//     warp per (token, KV head, 16 query heads, key split) walks the split's keys; with several
//     splits the partial max / sum / output go to scratch ...
//   - merge: ... and this kernel combines them (split-K), so a lone long context still spreads
//     over the whole GPU.
// Both kinds of token can share a batch; each kernel skips the tokens of the other. Every key loop
// is bounded by the token's position, itself checked against max_position and the page table.
// With a sliding window, keys before p - window + 1 are masked (prefill), skipped by the splits
// that lie wholly before the window (decode: no partials written, and the merge starts at the
// first split inside it), and never loaded before the run's earliest window start.
// A cache with a quantized side goes to launch_attention_quant (attention_quant.cu) instead, which
// shares the split plan, the scratch layout and the merge kernel (attention_split.h).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/attention_split.h"
#include "kernels/cuda/attention_warp.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {
namespace {

using attention_detail::attend_range;
using attention_detail::block_halves;
using attention_detail::KvSource;
using attention_detail::kBlockKeys;
using attention_detail::kWarpRows;
using attention_detail::load_q_fragment;
using attention_detail::WarpSoftmax;
using attention_split::plan_splits;
using attention_split::SplitPlan;

constexpr int kPrefillWarps = 4;
constexpr int kPrefillThreads = kPrefillWarps * 32;
constexpr int kPrefillRows = kPrefillWarps * kWarpRows;  // 64 (token, head) rows per block
constexpr float kLog2e = 1.4426950408889634f;

// Split-K policy for the decode kernel: split keys only while the batch has fewer than
// kTargetRows (token, head) rows (below that the GPU's ~132 SMs are not filled by whole-context
// warps), into at most kMaxSplits splits of at least kMinKeysPerSplit keys.
constexpr int64_t kTargetRows = 4096;
constexpr int64_t kMaxSplits = 64;
constexpr int64_t kMinKeysPerSplit = 64;

struct AttnArgs {
  const __half* q;
  const __half* k_pages;
  const __half* v_pages;
  __half* out;
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* page_table;
  float* scratch;  // split-K partials: [rows · splits] (max, sum) pairs, then [rows · splits, D]
  int64_t tokens, num_seqs, max_pages, num_pages, heads, kv_heads, group;
  int32_t page_size, max_position;
  float scale_log2;
  int32_t splits, chunk;  // decode: keys [s · chunk, (s + 1) · chunk) go to split s
  int32_t window;         // 0: full causal
};

// First key position a token at `pos` sees.
__device__ __forceinline__ int32_t window_start(const AttnArgs& a, int32_t pos) {
  return a.window > 0 ? max(0, pos - a.window + 1) : 0;
}

// A token whose neighbours in the batch belong to other sequences: the decode kernel's.
__device__ __forceinline__ bool is_single(const AttnArgs& a, int64_t t) {
  const int32_t seq = a.token_seq[t];
  return (t == 0 || a.token_seq[t - 1] != seq) && (t + 1 == a.tokens || a.token_seq[t + 1] != seq);
}

// The token's position after checking its metadata against the batch (violations trap).
__device__ __forceinline__ int32_t checked_position(const AttnArgs& a, int64_t t) {
  const int32_t seq = a.token_seq[t];
  const int32_t pos = a.positions[t];
  if (seq < 0 || seq >= a.num_seqs || pos < 0 || pos > a.max_position || pos / a.page_size >= a.max_pages) {
    __trap();
  }
  return pos;
}

template <int D>
__device__ __forceinline__ KvSource<D> kv_source(const AttnArgs& a, int32_t seq, int32_t kv_head) {
  return KvSource<D>{a.k_pages, a.v_pages, a.page_table + seq * a.max_pages, a.kv_heads, a.num_pages,
                     a.page_size, kv_head};
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
__global__ void __launch_bounds__(kPrefillThreads) attention_prefill_kernel(const AttnArgs a) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  __shared__ __align__(16) __half smem[2][2][block_halves<D>()];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
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
      attend_range<D, kPrefillThreads>(smem, kv_source<D>(a, seq, kv_head), run_min_start, run_max + 1, qf, limit,
                                       lower, warp_limit, warp_lower, a.scale_log2, st);
    }
    run_begin = run_end + 1;
  }
  store_normalised<D>(st, out_row[0], out_row[1]);
}

template <int D>
__global__ void __launch_bounds__(32) attention_decode_kernel(const AttnArgs a) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  __shared__ __align__(16) __half smem[2][2][block_halves<D>()];
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
  attend_range<D, 32>(smem, kv_source<D>(a, a.token_seq[t], kv_head), begin, end, qf, limit, lower, end - 1, begin,
                      a.scale_log2, st);

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

// One block of D threads per (token, head) of a single token: out = Σ_s w_s · acc_s / Σ_s w_s ·
// l_s with w_s = exp2(m_s - max_s m_s), over the splits that hold part of the context.
__global__ void attention_merge_kernel(const AttnArgs a, int head_dim) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  const int64_t t = blockIdx.x / a.heads;
  const int64_t h = blockIdx.x % a.heads;
  if (!is_single(a, t)) return;
  const int32_t pos = checked_position(a, t);
  const int32_t used = min(a.splits, pos / a.chunk + 1);
  const int32_t skipped = window_start(a, pos) / a.chunk;  // splits wholly before the window
  const int64_t first = (t * a.heads + h) * a.splits;
  const float* ml = a.scratch;
  const float* acc = a.scratch + 2 * a.tokens * a.heads * a.splits;
  float m_max = -INFINITY;
  for (int32_t s = skipped; s < used; ++s) m_max = fmaxf(m_max, ml[2 * (first + s)]);
  const float m_use = m_max == -INFINITY ? 0.0f : m_max;
  const int d = static_cast<int>(threadIdx.x);
  float sum = 0.0f, value = 0.0f;
  for (int32_t s = skipped; s < used; ++s) {
    const float w = exp2f(ml[2 * (first + s)] - m_use);
    sum += w * ml[2 * (first + s) + 1];
    value += w * acc[(first + s) * head_dim + d];
  }
  a.out[(t * a.heads + h) * head_dim + d] = __float2half_rn(sum > 0.0f ? value / sum : 0.0f);
}

// A batch of as many sequences as tokens has one token per sequence: every token is single and
// the prefill kernel would only skip them all, so it is not launched.
template <int D>
void launch_for_head_dim(const AttnArgs& args, cudaStream_t stream) {
  if (args.tokens > args.num_seqs) {
    const int64_t prefill_tiles = (args.tokens * args.group + kPrefillRows - 1) / kPrefillRows;
    EXL3_CHECK(prefill_tiles <= std::numeric_limits<int32_t>::max(), "attention: too many rows");
    attention_prefill_kernel<D><<<dim3(static_cast<unsigned>(prefill_tiles), static_cast<unsigned>(args.kv_heads)),
                                  kPrefillThreads, 0, stream>>>(args);
    EXL3_CUDA_CHECK_LAUNCH();
  }
  const int64_t head_tiles = (args.group + kWarpRows - 1) / kWarpRows;
  attention_decode_kernel<D><<<dim3(static_cast<unsigned>(args.tokens), static_cast<unsigned>(args.kv_heads * head_tiles),
                                    static_cast<unsigned>(args.splits)),
                               32, 0, stream>>>(args);
  EXL3_CUDA_CHECK_LAUNCH();
  if (args.splits > 1) {
    attention_merge_kernel<<<static_cast<unsigned>(args.tokens * args.heads), D, 0, stream>>>(args, D);
    EXL3_CUDA_CHECK_LAUNCH();
  }
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

namespace attention_split {

SplitPlan plan_splits(int64_t tokens, int64_t heads, int32_t max_position, int64_t min_keys_per_split) {
  EXL3_CHECK(min_keys_per_split > 0 && min_keys_per_split % kBlockKeys == 0, "plan_splits: min_keys_per_split ",
             min_keys_per_split);
  const int64_t rows = tokens * heads;
  const int64_t keys = static_cast<int64_t>(max_position) + 1;
  int64_t splits = rows >= kTargetRows ? 1 : std::min(kMaxSplits, (kTargetRows + rows - 1) / rows);
  splits = std::max<int64_t>(1, std::min(splits, (keys + min_keys_per_split - 1) / min_keys_per_split));
  const int64_t per_split = (keys + splits - 1) / splits;
  const int64_t chunk = (per_split + kBlockKeys - 1) / kBlockKeys * kBlockKeys;
  return {(keys + chunk - 1) / chunk, chunk};
}

void check_split_scratch(const AttentionParams& p, const SplitPlan& plan, const char* who) {
  if (plan.splits <= 1) return;
  const int64_t needed = p.batch.tokens * p.heads * plan.splits * (p.head_dim + 2);
  EXL3_CHECK(p.scratch != nullptr && p.scratch_floats >= needed, who, ": scratch of ", p.scratch_floats, " floats, ",
             needed, " needed (size it with attention_scratch_floats)");
  EXL3_CHECK(aligned(p.scratch, 8), who, ": scratch must be 8-byte aligned");
}

void launch_attention_merge(const AttentionParams& p, const SplitPlan& plan, cudaStream_t stream) {
  const PagedBatch& b = p.batch;
  EXL3_CHECK(plan.splits > 1 && plan.chunk > 0 && (p.head_dim == 64 || p.head_dim == 128),
             "attention merge: splits ", plan.splits, " chunk ", plan.chunk, " head_dim ", p.head_dim);
  const AttnArgs args{p.q,          p.k_pages,    p.v_pages,         p.out,
                      b.positions,  b.token_seq,  b.page_table,      p.scratch,
                      b.tokens,     b.num_seqs,   b.max_pages,       p.num_pages,
                      p.heads,      p.kv_heads,   p.heads / p.kv_heads,
                      static_cast<int32_t>(b.page_size), b.max_position, p.scale * kLog2e,
                      static_cast<int32_t>(plan.splits), static_cast<int32_t>(plan.chunk),
                      static_cast<int32_t>(p.window)};
  attention_merge_kernel<<<static_cast<unsigned>(b.tokens * p.heads), static_cast<unsigned>(p.head_dim), 0, stream>>>(
      args, static_cast<int>(p.head_dim));
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace attention_split

int64_t attention_scratch_floats(int64_t tokens, int64_t heads, int64_t head_dim) {
  EXL3_CHECK(tokens >= 0 && heads > 0 && head_dim > 0, "attention_scratch_floats: tokens ", tokens, " heads ", heads,
             " head_dim ", head_dim);
  // Splits happen only while tokens·heads < kTargetRows, and then tokens·heads·splits <
  // kTargetRows + tokens·heads < 2·kTargetRows: a bound for every batch of at most `tokens`.
  return std::min(tokens * heads * kMaxSplits, 2 * kTargetRows) * (head_dim + 2);
}

// Contract: k_bits = v_bits = 16 here (otherwise launch_attention_quant's contract applies);
// window >= 0; tokens >= 0; heads > 0, kv_heads > 0, heads % kv_heads == 0; head_dim 64 or 128;
// scale > 0 (1/sqrt(head_dim) for attention_ref); num_pages > 0; batch.page_size > 0,
// batch.num_seqs > 0, batch.max_pages > 0, batch.max_position >= every position; q, out F16
// [tokens, heads, head_dim] (4-byte aligned, not overlapping); k_pages, v_pages F16 [num_pages,
// page_size, kv_heads, head_dim] (16-byte aligned) holding positions 0..positions[t] of every
// token's sequence (kv_write of this step's tokens first); metadata I32 as in PagedBatch, every
// token's sequence, position and page inside those shapes (violations trap). scratch: at least
// attention_scratch_floats(tokens, heads, head_dim) floats (only read when a decode token's
// context is split; may be null when that cannot happen, which is checked). tokens·heads and
// max_position + 1 below 2^31.
void launch_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.k_bits != 16 || p.v_bits != 16) {
    launch_attention_quant(p, stream);
    return;
  }
  const PagedBatch& b = p.batch;
  EXL3_CHECK(p.window >= 0 && p.window <= std::numeric_limits<int32_t>::max(), "attention: window ", p.window);
  EXL3_CHECK(b.tokens >= 0 && b.tokens * std::max<int64_t>(p.heads, 1) <= std::numeric_limits<int32_t>::max(),
             "attention: tokens ", b.tokens, " heads ", p.heads);
  EXL3_CHECK(p.heads > 0 && p.kv_heads > 0 && p.heads % p.kv_heads == 0, "attention: heads ", p.heads,
             " not a multiple of kv_heads ", p.kv_heads);
  EXL3_CHECK(p.head_dim == 64 || p.head_dim == 128, "attention: head_dim ", p.head_dim,
             " unsupported (64 or 128 only)");
  EXL3_CHECK(p.scale > 0.0f, "attention: scale ", p.scale);
  EXL3_CHECK(p.num_pages > 0 && b.page_size > 0 && b.page_size <= std::numeric_limits<int32_t>::max(),
             "attention: num_pages ", p.num_pages, " page_size ", b.page_size);
  EXL3_CHECK(b.num_seqs > 0 && b.max_pages > 0, "attention: num_seqs ", b.num_seqs, " max_pages ", b.max_pages);
  EXL3_CHECK(b.max_position >= 0 && b.max_position < std::numeric_limits<int32_t>::max(), "attention: max_position ",
             b.max_position);
  EXL3_CHECK(p.kv_heads * ((p.heads / p.kv_heads + kWarpRows - 1) / kWarpRows) <= 65535, "attention: ", p.heads,
             " heads over ", p.kv_heads, " KV heads exceed the grid");
  if (b.tokens == 0) return;
  EXL3_CHECK(p.q != nullptr && p.out != nullptr && p.k_pages != nullptr && p.v_pages != nullptr,
             "attention: null q/k/v/out");
  EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr,
             "attention: null batch metadata");
  EXL3_CHECK(aligned(p.q, 4) && aligned(p.out, 4), "attention: q and out must be 4-byte aligned");
  EXL3_CHECK(aligned(p.k_pages, 16) && aligned(p.v_pages, 16), "attention: pages must be 16-byte aligned");

  const SplitPlan plan = plan_splits(b.tokens, p.heads, b.max_position, kMinKeysPerSplit);
  attention_split::check_split_scratch(p, plan, "attention");
  const AttnArgs args{p.q,          p.k_pages,    p.v_pages,         p.out,
                      b.positions,  b.token_seq,  b.page_table,      p.scratch,
                      b.tokens,     b.num_seqs,   b.max_pages,       p.num_pages,
                      p.heads,      p.kv_heads,   p.heads / p.kv_heads,
                      static_cast<int32_t>(b.page_size), b.max_position, p.scale * kLog2e,
                      static_cast<int32_t>(plan.splits), static_cast<int32_t>(plan.chunk),
                      static_cast<int32_t>(p.window)};
  if (p.head_dim == 64) {
    launch_for_head_dim<64>(args, stream);
  } else {
    launch_for_head_dim<128>(args, stream);
  }
}

}  // namespace exl3
