// CPU backend paged KV-cache write for a batch of sequences: full-precision sides copied,
// quantized sides (exl3-format.md §9) quantized group by group.
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {
namespace {

void write_side(Tensor& pages, Tensor& words, Tensor& scales, int bits, int64_t row, int64_t slot, const float* src) {
  if (bits == 16) {
    std::copy_n(src, row, static_cast<float*>(pages.mutable_raw()) + slot * row);
    return;
  }
  const int64_t groups = row / 32;
  kv_quantize_row_cpu(src, groups, bits, static_cast<uint32_t*>(words.mutable_raw()) + slot * groups * bits,
                      static_cast<uint16_t*>(scales.mutable_raw()) + slot * groups);
}

}  // namespace

void kv_write_cpu(PagedKv& cache, const float* k, const float* v, const CpuPagedBatch& b) {
  const int64_t row = cache.kv_heads * cache.head_dim;
  for (int64_t t = 0; t < b.tokens; ++t) {
    const int64_t p = b.positions[t];
    const int64_t page = b.page_table[b.token_seq[t] * b.max_pages + p / cache.page_size];
    const int64_t slot = page * cache.page_size + p % cache.page_size;
    write_side(cache.k_pages, cache.k_words, cache.k_scales, cache.k_bits, row, slot, k + t * row);
    write_side(cache.v_pages, cache.v_words, cache.v_scales, cache.v_bits, row, slot, v + t * row);
  }
}

}  // namespace exl3
