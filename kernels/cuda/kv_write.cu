// CUDA paged KV-cache write: the device twin of kv_write_ref over a batch, one block per token
// copying its k and v rows (kv_heads · head_dim halves) to slot pos % page_size of page
// page_table[seq][pos / page_size], or, for a quantized side, quantizing them a warp per 32-element
// group (kv_quant.cuh). Metadata outside the cache traps (a caller bug) instead of writing out of
// bounds.
#include <cstdint>
#include <limits>
#include <tuple>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_cache_slots.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 128;

struct KvWriteArgs {
  const __half* k;
  const __half* v;
  __half* k_pages;
  __half* v_pages;
  CacheSlots slots;
  int64_t words;  // Words per row (kv_heads · head_dim halves)
};

template <typename Word>
__global__ void kv_write_kernel(const KvWriteArgs a) {
  const int64_t t = blockIdx.x;
  const int64_t dst = a.slots.row_of(t) * a.words;
  const Word* k = reinterpret_cast<const Word*>(a.k) + t * a.words;
  const Word* v = reinterpret_cast<const Word*>(a.v) + t * a.words;
  Word* kp = reinterpret_cast<Word*>(a.k_pages) + dst;
  Word* vp = reinterpret_cast<Word*>(a.v_pages) + dst;
  for (int64_t w = threadIdx.x; w < a.words; w += blockDim.x) {
    kp[w] = k[w];
    vp[w] = v[w];
  }
}

struct KvWriteQuantArgs {
  const __half* k;
  const __half* v;
  KvSide k_side, v_side;
  CacheSlots slots;
  int64_t row;  // kv_heads · head_dim
};

// One token's row of one side: F16 copied by every thread, or quantized a warp per group.
__device__ __forceinline__ void write_side(const __half* src, const KvSide& side, int64_t row, int64_t slot) {
  if (side.bits == 16) {
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) side.pages[slot * row + i] = src[i];
    return;
  }
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int64_t groups = row / 32;
  for (int64_t g = threadIdx.x / 32; g < groups; g += warps) {
    kv_quant::warp_quantize_group(__half2float(src[g * 32 + lane]), side.bits, lane,
                                  side.words + (slot * groups + g) * side.bits, side.scales + slot * groups + g);
  }
}

__global__ void kv_write_quant_kernel(const KvWriteQuantArgs a) {
  const int64_t t = blockIdx.x;
  const int64_t slot = a.slots.row_of(t);
  write_side(a.k + t * a.row, a.k_side, a.row, slot);
  write_side(a.v + t * a.row, a.v_side, a.row, slot);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

// Contract: tokens >= 0 (< 2^31), kv_heads > 0, head_dim > 0, num_pages > 0, page_size > 0,
// num_seqs > 0, max_pages > 0; k, v F16 [tokens, kv_heads, head_dim]; per side, bits 16 with
// pages F16 [num_pages, page_size, kv_heads, head_dim], or bits 2..8 with kv_heads · head_dim a
// multiple of 32, words I32 [num_pages, page_size, kv_heads · head_dim / 32 · bits] and scales F16
// [num_pages, page_size, kv_heads · head_dim / 32]; batch.positions, batch.token_seq I32 [tokens],
// batch.page_table I32 [num_seqs, max_pages]; every token's sequence, position and page inside
// those shapes (violations trap). Two tokens writing one slot is a caller bug.
void launch_kv_write(const KvWriteParams& p, cudaStream_t stream) {
  const PagedBatch& b = p.batch;
  EXL3_CHECK(b.tokens >= 0 && b.tokens <= std::numeric_limits<int32_t>::max(), "kv_write: tokens ", b.tokens);
  EXL3_CHECK(p.kv_heads > 0 && p.head_dim > 0 && p.num_pages > 0, "kv_write: kv_heads ", p.kv_heads,
             " head_dim ", p.head_dim, " num_pages ", p.num_pages);
  EXL3_CHECK(b.page_size > 0 && b.num_seqs > 0 && b.max_pages > 0, "kv_write: page_size ", b.page_size,
             " num_seqs ", b.num_seqs, " max_pages ", b.max_pages);
  if (b.tokens == 0) return;
  const int64_t row_halves = p.kv_heads * p.head_dim;
  for (const auto& [bits, pages, words, scales] :
       {std::make_tuple(p.k_bits, p.k_pages, p.k_words, p.k_scales),
        std::make_tuple(p.v_bits, p.v_pages, p.v_words, p.v_scales)}) {
    const bool full = bits == 16 && pages != nullptr;
    const bool quantized = bits >= 2 && bits <= 8 && row_halves % 32 == 0 && words != nullptr && scales != nullptr;
    EXL3_CHECK(full || quantized, "kv_write: a side of ", bits, " bits (16 with pages, or 2..8 with words and ",
               "scales and a row that is a multiple of 32) over a row of ", row_halves);
  }
  EXL3_CHECK(p.k != nullptr && p.v != nullptr, "kv_write: null k/v pointer");
  EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr,
             "kv_write: null batch metadata");
  const CacheSlots slots = cache_slots(b, p.num_pages);
  if (p.k_bits != 16 || p.v_bits != 16) {
    const KvWriteQuantArgs q{p.k, p.v, KvSide{p.k_pages, p.k_words, p.k_scales, p.k_bits},
                             KvSide{p.v_pages, p.v_words, p.v_scales, p.v_bits}, slots, row_halves};
    kv_write_quant_kernel<<<static_cast<unsigned>(b.tokens), kThreads, 0, stream>>>(q);
    EXL3_CUDA_CHECK_LAUNCH();
    return;
  }
  KvWriteArgs a{p.k, p.v, p.k_pages, p.v_pages, slots, 0};
  const bool wide = row_halves % 8 == 0 && aligned16(p.k) && aligned16(p.v) && aligned16(p.k_pages) &&
                    aligned16(p.v_pages);
  if (wide) {
    a.words = row_halves / 8;
    kv_write_kernel<uint4><<<static_cast<unsigned>(b.tokens), kThreads, 0, stream>>>(a);
  } else {
    a.words = row_halves;
    kv_write_kernel<__half><<<static_cast<unsigned>(b.tokens), kThreads, 0, stream>>>(a);
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
