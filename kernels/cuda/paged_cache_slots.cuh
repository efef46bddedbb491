// Where a step's tokens go in the paged KV cache, for the kernels that write it (kv_write.cu,
// rope_kv_write.cu, the q/k/v output pass of exl3_gemv_output.cu): the row page · page_size +
// pos % page_size, page = page_table[seq][pos / page_size]. Metadata outside the page table or a
// page outside the cache traps (a caller bug) instead of writing out of bounds. Device code only.
#pragma once

#include <cstdint>

#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {

struct CacheSlots {
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* page_table;
  int64_t num_seqs, max_pages, page_size, num_pages;

  // The page holding position pos of sequence seq.
  __device__ __forceinline__ int32_t page_of(int32_t seq, int32_t pos) const {
    if (seq < 0 || seq >= num_seqs || pos < 0 || pos / page_size >= max_pages) __trap();
    return page_table[seq * max_pages + pos / page_size];
  }

  // The cache row of position pos in `page` (page_of's).
  __device__ __forceinline__ int64_t row_in(int32_t page, int32_t pos) const {
    if (page < 0 || page >= num_pages) __trap();
    return static_cast<int64_t>(page) * page_size + pos % page_size;
  }

  // The cache row of the batch's token t.
  __device__ __forceinline__ int64_t row_of(int64_t t) const {
    const int32_t seq = token_seq[t];
    const int32_t pos = positions[t];
    return row_in(page_of(seq, pos), pos);
  }
};

// The slots of a batch in a cache of num_pages pages.
__host__ __device__ __forceinline__ CacheSlots cache_slots(const PagedBatch& b, int64_t num_pages) {
  return {b.positions, b.token_seq, b.page_table, b.num_seqs, b.max_pages, b.page_size, num_pages};
}

}  // namespace exl3
