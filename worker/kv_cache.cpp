// Paged KV cache storage and page allocation.
#include "worker/kv_cache.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  EXL3_CHECK(shape.page_size > 0 && shape.num_pages > 0, "KV cache needs pages");
  for (int64_t heads : shape.layer_kv_heads) {
    PagedKv kv;
    kv.page_size = shape.page_size;
    kv.k_pages = Tensor::zeros(DType::kF32, {shape.num_pages, shape.page_size, heads, shape.head_dim});
    kv.v_pages = Tensor::zeros(DType::kF32, {shape.num_pages, shape.page_size, heads, shape.head_dim});
    layers_.push_back(std::move(kv));
  }
  for (int64_t p = shape.num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

absl::Status KvCache::reserve(PageTable& table, int64_t tokens) {
  const int64_t needed = (tokens + shape_.page_size - 1) / shape_.page_size - static_cast<int64_t>(table.pages.size());
  if (needed <= 0) return absl::OkStatus();
  if (needed > free_pages()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache: ", tokens, " tokens need ", needed,
                                                     " more pages, only ", free_pages(), " of ", shape_.num_pages,
                                                     " are free"));
  }
  for (int64_t i = 0; i < needed; ++i) {
    table.pages.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void KvCache::release(PageTable& table) {
  for (int32_t p : table.pages) free_.push_back(p);
  table.pages.clear();
}

uint64_t KvCache::bytes_for(const KvCacheShape& s) {
  uint64_t heads = 0;
  for (int64_t h : s.layer_kv_heads) heads += static_cast<uint64_t>(h);
  return 2ull * heads * s.num_pages * s.page_size * s.head_dim * sizeof(float);
}

}  // namespace exl3
