// CUDA paged KV-cache write: the device twin of kv_write_ref over a batch, one block per token
// copying its k and v rows (kv_heads · head_dim halves) to slot pos % page_size of page
// page_table[seq][pos / page_size]. Metadata outside the cache traps (a caller bug) instead of
// writing out of bounds.
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 128;

struct KvWriteArgs {
  const __half* k;
  const __half* v;
  __half* k_pages;
  __half* v_pages;
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* page_table;
  int64_t num_seqs, max_pages, page_size, num_pages;
  int64_t words;  // Words per row (kv_heads · head_dim halves)
};

template <typename Word>
__global__ void kv_write_kernel(const KvWriteArgs a) {
  const int64_t t = blockIdx.x;
  const int32_t seq = a.token_seq[t];
  const int32_t pos = a.positions[t];
  if (seq < 0 || seq >= a.num_seqs || pos < 0 || pos / a.page_size >= a.max_pages) __trap();
  const int32_t page = a.page_table[seq * a.max_pages + pos / a.page_size];
  if (page < 0 || page >= a.num_pages) __trap();
  const int64_t dst = (static_cast<int64_t>(page) * a.page_size + pos % a.page_size) * a.words;
  const Word* k = reinterpret_cast<const Word*>(a.k) + t * a.words;
  const Word* v = reinterpret_cast<const Word*>(a.v) + t * a.words;
  Word* kp = reinterpret_cast<Word*>(a.k_pages) + dst;
  Word* vp = reinterpret_cast<Word*>(a.v_pages) + dst;
  for (int64_t w = threadIdx.x; w < a.words; w += blockDim.x) {
    kp[w] = k[w];
    vp[w] = v[w];
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

// Contract: tokens >= 0 (< 2^31), kv_heads > 0, head_dim > 0, num_pages > 0, page_size > 0,
// num_seqs > 0, max_pages > 0; k, v F16 [tokens, kv_heads, head_dim]; k_pages, v_pages F16
// [num_pages, page_size, kv_heads, head_dim]; batch.positions, batch.token_seq I32 [tokens],
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
  EXL3_CHECK(p.k != nullptr && p.v != nullptr && p.k_pages != nullptr && p.v_pages != nullptr,
             "kv_write: null k/v pointer");
  EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr,
             "kv_write: null batch metadata");
  const int64_t row_halves = p.kv_heads * p.head_dim;
  KvWriteArgs a{p.k, p.v, p.k_pages, p.v_pages, b.positions, b.token_seq, b.page_table,
                b.num_seqs, b.max_pages, b.page_size, p.num_pages, 0};
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
