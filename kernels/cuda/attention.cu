// CUDA paged causal grouped-query attention over an F16 cache: the device twin of attention_ref
// over a batch (kernels/cuda/paged_attention.cuh). The prefill and decode kernels of
// attention_kernels.cuh (tensor cores: mma.sync m16n8k16, fp16 in, fp32 softmax and accumulation)
// with their blocks of keys copied from the F16 pages by cp.async (attention_f16_tile.cuh): prefill
// blocks of 4 warps (64 (token, query head) rows), decode splits of at least 32 keys. This file
// also holds what both paths share of split-K (attention_split.h): the split plan and the merge
// kernel, launched after the decode kernel when a token's keys are split, so a lone long context
// still spreads over the whole GPU. A cache with a quantized side goes to launch_attention_quant
// (attention_quant.cu) instead.
#include <algorithm>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/attention_f16_tile.cuh"
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_split.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {
namespace {

using attention_detail::aligned;
using attention_detail::AttnArgs;
using attention_detail::block_halves;
using attention_detail::checked_position;
using attention_detail::F16Blocks;
using attention_detail::is_single;
using attention_detail::kBlockKeys;
using attention_detail::KvSource;
using attention_detail::window_start;
using attention_split::SplitPlan;

// Split-K policy for the decode kernel: split keys only while the batch has fewer (token, head)
// rows than attention_split::kSplitTargetRows (below it the GPU's ~132 SMs are not filled by
// whole-context warps), into at most kMaxSplits splits (of at least a Source's kMinKeysPerSplit
// keys).
using attention_scratch::kMaxSplits;

// Blocks of keys from F16 pages (both sides at 16 bits), the block source of attention_kernels.cuh
// and attention_launch.cuh for this path.
struct F16Source {
  static constexpr int kPrefillWarps = 4;
  // No helper warps: at batch 1 they measured +0.6% / +1.1% in the 8B at 2048- / 512-token prompts
  // (H100, one round, within its spread) and the op alone 13.2 -> 14.7 us (session 22, run 1).
  static constexpr int kSingleTokenDecodeWarps = 1;
  // One block of keys: against two (64), 8B decode with int8 auto on the H100 (session 16, four
  // rounds of 64 steps) at a 32-token prompt batch 1 +4.3%, 8 +3.4%; at 512 batch 1 +3.2%, 8 -0.5%;
  // at 2048 batch 1 -0.5%, 4 -0.3%: a short context's latency spread over twice the warps, a long
  // one (already in up to 33 splits) even.
  static constexpr int64_t kMinKeysPerSplit = kBlockKeys;

  template <int D, int kThreads>
  __device__ __forceinline__ static F16Blocks<D, kThreads> blocks(const AttnArgs& a, int32_t seq, int32_t kv_head,
                                                                  int32_t begin, int32_t end) {
    __shared__ __align__(16) __half smem[2][2][block_halves<D>()];
    const KvSource<D> src{a.k.pages, a.v.pages,
                          {a.page_table + seq * a.max_pages, a.kv_heads, a.num_pages, a.page_size, kv_head}};
    return F16Blocks<D, kThreads>(src, smem, begin, end);
  }

  static int smem_bytes(const AttnArgs&, int) { return 0; }  // static shared memory only

  // Pages may be null for an empty batch.
  static void check_cache(const AttentionParams& p, const char* who) {
    if (p.batch.tokens == 0) return;
    EXL3_CHECK(p.k_pages != nullptr && p.v_pages != nullptr, who, ": null k/v pages");
    EXL3_CHECK(aligned(p.k_pages, 16) && aligned(p.v_pages, 16), who, ": pages must be 16-byte aligned");
  }
};

// One block of D threads per (token, head) of a single token: out = Σ_s w_s · acc_s / Σ_s w_s ·
// l_s with w_s = exp2(m_s - max_s m_s), over the splits that hold part of the context.
__global__ void attention_merge_kernel(const AttnArgs a, int head_dim) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  wait_for_prerequisites();  // launched dependent, after the decode kernel's partials
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

}  // namespace

namespace attention_split {

SplitPlan plan_splits(int64_t tokens, int64_t heads, int32_t max_position, int64_t min_keys_per_split,
                      int64_t target_rows) {
  EXL3_CHECK(min_keys_per_split > 0 && min_keys_per_split % kBlockKeys == 0, "plan_splits: min_keys_per_split ",
             min_keys_per_split);
  EXL3_CHECK(target_rows > 0 && target_rows <= kMaxSplitTargetRows, "plan_splits: target_rows ", target_rows);
  const int64_t rows = tokens * heads;
  const int64_t keys = static_cast<int64_t>(max_position) + 1;
  int64_t splits = rows >= target_rows ? 1 : std::min(kMaxSplits, (target_rows + rows - 1) / rows);
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
  const AttnArgs args = attention_detail::make_attn_args(p, plan);
  launch_dependent(attention_merge_kernel, dim3(static_cast<unsigned>(b.tokens * p.heads)),
                   dim3(static_cast<unsigned>(p.head_dim)), stream, args, static_cast<int>(p.head_dim));
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace attention_split

int64_t attention_scratch_floats(int64_t tokens, int64_t heads, int64_t head_dim) {
  EXL3_CHECK(tokens >= 0 && heads > 0 && head_dim > 0, "attention_scratch_floats: tokens ", tokens, " heads ", heads,
             " head_dim ", head_dim);
  return attention_scratch::floats(tokens, heads, head_dim);
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
// max_position + 1 below 2^31. Launches: those of launch_attention_kernels (attention_launch.cuh);
// static shared memory only (36 KiB at most); no allocation.
void launch_attention(const AttentionParams& p, cudaStream_t stream) {
  if (p.k_bits != 16 || p.v_bits != 16) {
    launch_attention_quant(p, stream);
    return;
  }
  attention_detail::launch_paged_attention<F16Source>(p, stream, "attention");
}

}  // namespace exl3
