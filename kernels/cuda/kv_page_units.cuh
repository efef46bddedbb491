// Where the keys of one (sequence, KV head) lie in a paged KV cache, for the attention kernels'
// block sources (attention_f16_tile.cuh, kv_quant_tile.cuh): a key position's unit, cache row ·
// kv_heads + kv_head, indexes that key's head in any per-(row, KV head) array of the cache (F16
// pages: unit · D halves; quantized sides: their words and scales).
#pragma once

#include <cstdint>

namespace exl3::attention_detail {

struct PageUnits {
  const int32_t* page_table;  // this sequence's row of the page table
  int64_t kv_heads, num_pages;
  int32_t page_size, kv_head;

  // The unit of key position `pos`; a page outside the cache traps.
  __device__ __forceinline__ int64_t unit(int32_t pos) const {
    const int32_t page = page_table[pos / page_size];
    if (page < 0 || page >= num_pages) __trap();
    return (static_cast<int64_t>(page) * page_size + pos % page_size) * kv_heads + kv_head;
  }
};

// unit() of the keys of one block [start, last]: when they lie in one page (always with 32-aligned
// blocks and pages of a multiple of 32 keys) its page is looked up once and consecutive keys are
// kv_heads units apart; otherwise each key looks up its own page. (A lookup per copy, a division
// and a dependent page-table load each, made the copies' addressing ~3/4 of the decode kernel's
// instructions and serialised its loads.)
struct BlockUnits {
  const PageUnits& pages;
  int32_t start;
  bool one_page;
  int64_t first;

  __device__ __forceinline__ BlockUnits(const PageUnits& p, int32_t block_start, int32_t last)
      : pages(p), start(block_start), one_page(block_start / p.page_size == last / p.page_size) {
    first = one_page ? p.unit(block_start) : 0;
  }
  __device__ __forceinline__ int64_t operator()(int32_t pos) const {
    return one_page ? first + static_cast<int64_t>(pos - start) * pages.kv_heads : pages.unit(pos);
  }
};

}  // namespace exl3::attention_detail
