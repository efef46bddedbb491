// CPU backend paged KV-cache write for a batch of sequences.
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void kv_write_cpu(PagedKv& cache, const float* k, const float* v, const CpuPagedBatch& b) {
  const int64_t row = cache.k_pages.dim(2) * cache.k_pages.dim(3);
  float* kp = static_cast<float*>(cache.k_pages.mutable_raw());
  float* vp = static_cast<float*>(cache.v_pages.mutable_raw());
  for (int64_t t = 0; t < b.tokens; ++t) {
    const int64_t p = b.positions[t];
    const int64_t page = b.page_table[b.token_seq[t] * b.max_pages + p / cache.page_size];
    const int64_t dst = (page * cache.page_size + p % cache.page_size) * row;
    std::copy_n(k + t * row, row, kp + dst);
    std::copy_n(v + t * row, row, vp + dst);
  }
}

}  // namespace exl3
