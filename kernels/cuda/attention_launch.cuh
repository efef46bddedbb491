// Host side of paged attention, shared by the F16 path (attention.cu) and the quantized path
// (attention_quant.cu): the checks of launch_attention's contract (paged_attention.cuh) common to
// both, the split plan, and the launches of attention_kernels.cuh for one key/value block Source,
// which here also provides
//   static constexpr int64_t kMinKeysPerSplit;  // the decode splits' least keys (plan_splits)
//   static constexpr int kSingleTokenDecodeWarps;  // warps of a decode block when the batch is one
//                                                  // token (1 + helpers); one warp otherwise
//   static void check_cache(const AttentionParams&, const char* who);  // the cache sides
//   static int smem_bytes(const AttnArgs&, int head_dim);  // dynamic shared memory per block
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_split.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3::attention_detail {

inline bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// The decode kernel in blocks of kWarps warps (one attends, the rest help bring the keys in).
template <class Source, int D, int kWarps>
void launch_decode(const AttnArgs& args, dim3 grid, int smem, cudaStream_t stream) {
  launch_dependent_smem(attention_decode_kernel<Source, D, kWarps>, grid, dim3(kWarps * 32), static_cast<size_t>(smem),
                        stream, args);
}

// Launches: prefill (some sequence has several tokens: a batch of as many sequences as tokens
// has only single tokens, which the prefill kernel would all skip), decode (grid tokens x
// kv_heads · ceil(group / 16) x splits, one attending warp each), merge (splits > 1).
template <class Source, int D>
void launch_attention_kernels(const AttnArgs& args, const AttentionParams& p, const attention_split::SplitPlan& plan,
                              cudaStream_t stream) {
  constexpr int kPrefillThreads = Source::kPrefillWarps * 32;
  constexpr int kPrefillRows = Source::kPrefillWarps * kWarpRows;
  const int smem = Source::smem_bytes(args, D);
  if (args.tokens > args.num_seqs) {
    const int64_t prefill_tiles = (args.tokens * args.group + kPrefillRows - 1) / kPrefillRows;
    EXL3_CHECK(prefill_tiles <= std::numeric_limits<int32_t>::max(), "attention: too many rows");
    attention_prefill_kernel<Source, D>
        <<<dim3(static_cast<unsigned>(prefill_tiles), static_cast<unsigned>(args.kv_heads)), kPrefillThreads, smem,
           stream>>>(args);
    EXL3_CUDA_CHECK_LAUNCH();
  }
  const int64_t head_tiles = (args.group + kWarpRows - 1) / kWarpRows;
  const dim3 decode_grid(static_cast<unsigned>(args.tokens), static_cast<unsigned>(args.kv_heads * head_tiles),
                         static_cast<unsigned>(args.splits));
  if (args.tokens == 1) {
    launch_decode<Source, D, Source::kSingleTokenDecodeWarps>(args, decode_grid, smem, stream);
  } else {
    launch_decode<Source, D, 1>(args, decode_grid, smem, stream);
  }
  EXL3_CUDA_CHECK_LAUNCH();
  if (plan.splits > 1) attention_split::launch_attention_merge(p, plan, stream);
}

// launch_attention's contract checked (the sides by Source::check_cache), then the kernels of
// head_dim 64 or 128 launched; `who` names the path in errors.
template <class Source>
void launch_paged_attention(const AttentionParams& p, cudaStream_t stream, const char* who) {
  const PagedBatch& b = p.batch;
  EXL3_CHECK(p.window >= 0 && p.window <= std::numeric_limits<int32_t>::max(), who, ": window ", p.window);
  EXL3_CHECK(b.tokens >= 0 && b.tokens * std::max<int64_t>(p.heads, 1) <= std::numeric_limits<int32_t>::max(), who,
             ": tokens ", b.tokens, " heads ", p.heads);
  EXL3_CHECK(p.heads > 0 && p.kv_heads > 0 && p.heads % p.kv_heads == 0, who, ": heads ", p.heads,
             " not a multiple of kv_heads ", p.kv_heads);
  EXL3_CHECK(p.head_dim == 64 || p.head_dim == 128, who, ": head_dim ", p.head_dim, " unsupported (64 or 128 only)");
  EXL3_CHECK(p.scale > 0.0f, who, ": scale ", p.scale);
  EXL3_CHECK(p.num_pages > 0 && b.page_size > 0 && b.page_size <= std::numeric_limits<int32_t>::max(), who,
             ": num_pages ", p.num_pages, " page_size ", b.page_size);
  EXL3_CHECK(b.num_seqs > 0 && b.max_pages > 0, who, ": num_seqs ", b.num_seqs, " max_pages ", b.max_pages);
  EXL3_CHECK(b.max_position >= 0 && b.max_position < std::numeric_limits<int32_t>::max(), who, ": max_position ",
             b.max_position);
  EXL3_CHECK(p.kv_heads * ((p.heads / p.kv_heads + kWarpRows - 1) / kWarpRows) <= 65535, who, ": ", p.heads,
             " heads over ", p.kv_heads, " KV heads exceed the grid");
  Source::check_cache(p, who);
  if (b.tokens == 0) return;
  EXL3_CHECK(p.q != nullptr && p.out != nullptr, who, ": null q/out");
  EXL3_CHECK(aligned(p.q, 4) && aligned(p.out, 4), who, ": q and out must be 4-byte aligned");
  EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr, who, ": null batch metadata");

  const attention_split::SplitPlan plan = attention_split::plan_splits(
      b.tokens, p.heads, b.max_position, Source::kMinKeysPerSplit, attention_split::kSplitTargetRows);
  attention_split::check_split_scratch(p, plan, who);
  const AttnArgs args = make_attn_args(p, plan);
  if (p.head_dim == 64) {
    launch_attention_kernels<Source, 64>(args, p, plan, stream);
  } else {
    launch_attention_kernels<Source, 128>(args, p, plan, stream);
  }
}

}  // namespace exl3::attention_detail
