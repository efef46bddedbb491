// Reference paged KV-cache write: token rows go to page_table[p / page_size], slot p % page_size.
#include <algorithm>

#include "kernels/ops.h"

namespace exl3 {

void kv_write_ref(PagedKv& cache, std::span<const int32_t> page_table, std::span<const int32_t> positions,
                  const Tensor& k, const Tensor& v) {
  const int64_t num_pages = cache.k_pages.dim(0);
  const int64_t row = cache.k_pages.dim(2) * cache.k_pages.dim(3);
  EXL3_CHECK(k.shape() == v.shape() && k.numel() == static_cast<int64_t>(positions.size()) * row,
             "kv_write_ref: k ", shape_string(k.shape()), " v ", shape_string(v.shape()));
  float* kp = cache.k_pages.mutable_data<float>();
  float* vp = cache.v_pages.mutable_data<float>();
  for (size_t t = 0; t < positions.size(); ++t) {
    const int64_t p = positions[t];
    const int64_t logical_page = p / cache.page_size;
    EXL3_CHECK(p >= 0 && logical_page < static_cast<int64_t>(page_table.size()), "position ", p,
               " beyond the sequence's ", page_table.size(), " pages");
    const int64_t page = page_table[logical_page];
    EXL3_CHECK(page >= 0 && page < num_pages, "page ", page, " outside the cache");
    const int64_t dst = (page * cache.page_size + p % cache.page_size) * row;
    std::copy_n(k.data<float>() + t * row, row, kp + dst);
    std::copy_n(v.data<float>() + t * row, row, vp + dst);
  }
}

}  // namespace exl3
