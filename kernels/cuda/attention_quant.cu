// CUDA paged attention over a quantized KV cache (exl3-format.md §9; K and/or V quantized, each at
// its own width, the other side possibly F16 pages): the device twin of attention_ref for caches
// launch_attention hands over (paged_attention.cuh). The kernels of the F16 path
// (attention_kernels.cuh, attention.cu) with the keys and values of each block of 32 keys
// dequantized into shared memory as fp16 first (kv_quant_tile.cuh: the dequantized values are fp16
// by definition, bit-equal to the reference's, so nothing is lost) and then fed to the same
// tensor-core step (attend_block, attention_warp.cuh):
//   - prefill: blocks of 8 warps take 128 consecutive (token, query head) rows of one KV head
//     (every query head of a KV head for 128 / group tokens); the block dequantizes each key once
//     for all its rows;
//   - decode: one warp per (token, KV head, 16 query heads, key split) dequantizes and attends to
//     its split's keys only, with splits down to 32 keys (dequantizing costs more than loading F16
//     pages); the partials go to the F16 path's scratch and its merge kernel combines them
//     (attention_split.h).
// Never a dequantized copy of the cache: only the current block, with the next block's raw words
// and scales on their way (cp.async) meanwhile. A group of more than 16 query heads per KV head is
// taken 16 heads at a time (decode: 16 per warp; prefill rows span heads freely).
#include <cstdint>
#include <initializer_list>

#include "kernels/check.h"
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_warp.cuh"
#include "kernels/cuda/kv_quant_tile.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {
namespace {

using attention_detail::aligned;
using attention_detail::AttnArgs;
using attention_detail::kBlockKeys;
using kv_quant_tile::KvBlocks;
using kv_quant_tile::TileSource;

// Blocks of keys dequantized from a quantized cache (a side at 16 bits copied as is), the block
// source of attention_kernels.cuh and attention_launch.cuh for this path.
struct QuantSource {
  static constexpr int kPrefillWarps = 8;
  // A one-token decode is latency: its few blocks (8 KV heads x up to 64 splits in the 8B) each
  // dequantize 32 keys' K and V (256 groups of 32) before the one warp can attend. Three helper
  // warps do that 4x wider: 8B with int8 off at batch 1 (session 22, run 1, H100), 2048-token
  // prompts 4-bit 245.7 -> 252.8, 8-bit 244.2 -> 249.4 tokens/s; 512-token prompts 257.7 -> 261.0,
  // 252.2 -> 259.1. Not in batches (measured from 4 tokens; 2-3 not measured): there the helpers
  // idle while their warp attends, and one-warp blocks overlap one block's dequantization with
  // another's math: 4-bit at 2048-token prompts batch 4 / 16 / 32 891.7 / 2,367.5 / 3,201.0 ->
  // 811.9 / 2,062.1 / 2,692.1 (8-bit +2% / -2.5% / -2.5%; 512-token prompts -2% to -7%). The op
  // alone at batch 1 (its graph of back-to-back calls, no neighbours to overlap) measured
  // 4-bit 17.8 -> 18.5 us, 8-bit 19.6 -> 19.2.
  static constexpr int kSingleTokenDecodeWarps = 4;
  static constexpr int64_t kMinKeysPerSplit = kBlockKeys;  // one block, as the F16 path's

  template <int D, int kThreads>
  __device__ __forceinline__ static KvBlocks<D, kThreads> blocks(const AttnArgs& a, int32_t seq, int32_t kv_head,
                                                                 int32_t begin, int32_t end) {
    extern __shared__ __align__(16) unsigned char smem[];
    const TileSource src{a.k, a.v, {a.page_table + seq * a.max_pages, a.kv_heads, a.num_pages, a.page_size, kv_head}};
    return KvBlocks<D, kThreads>(src, smem, begin, end, static_cast<int>(threadIdx.x));
  }

  // Under 48 KiB (kv_quant_tile::smem_bytes): no opt-in needed.
  static int smem_bytes(const AttnArgs& a, int head_dim) {
    return kv_quant_tile::smem_bytes(head_dim, a.k.bits, a.v.bits);
  }

  static void check_cache(const AttentionParams& p, const char* who) {
    const ConstKvSide k{p.k_pages, p.k_words, p.k_scales, p.k_bits};
    const ConstKvSide v{p.v_pages, p.v_words, p.v_scales, p.v_bits};
    for (const ConstKvSide* side : {&k, &v}) {
      const bool full = side->bits == 16 && side->pages != nullptr && aligned(side->pages, 16);
      const bool quantized = side->bits >= 2 && side->bits <= 8 && side->words != nullptr && side->scales != nullptr &&
                             aligned(side->words, 16) && aligned(side->scales, 8);
      EXL3_CHECK(full || quantized, who, ": a side of ", side->bits,
                 " bits (16 with 16-byte aligned pages, or 2..8 with 16-byte aligned words and 8-byte aligned "
                 "scales)");
    }
  }
};

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
  attention_detail::launch_paged_attention<QuantSource>(p, stream, "attention_quant");
}

}  // namespace exl3
