// Paged KV cache storage and page allocation.
#include "worker/kv_cache.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace exl3 {

uint64_t KvCache::next_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::create(const KvCacheShape& shape, Backend& backend) {
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->shape_ = shape;
  EXL3_RETURN_IF_ERROR(cache->allocate(backend));
  return cache;
}

KvCache::KvCache(const KvCacheShape& shape, Backend& backend) : shape_(shape) { EXL3_CHECK_OK(allocate(backend)); }

absl::Status KvCache::allocate(Backend& backend) {
  const KvCacheShape& shape = shape_;
  if (shape.page_size <= 0 || shape.num_pages <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache needs pages: ", shape.num_pages, " pages of ",
                                                   shape.page_size, " tokens"));
  }
  for (size_t l = 0; l < shape.layer_kv_heads.size(); ++l) {
    const int64_t heads = shape.layer_kv_heads[l];
    PagedKv kv;
    kv.page_size = shape.page_size;
    const Shape pages{shape.num_pages, shape.page_size, heads, shape.head_dim};
    EXL3_ASSIGN_OR_RETURN(kv.k_pages, backend.allocate(backend.kv_dtype(), pages, absl::StrCat("KV cache keys of layer ", l)));
    EXL3_ASSIGN_OR_RETURN(kv.v_pages, backend.allocate(backend.kv_dtype(), pages, absl::StrCat("KV cache values of layer ", l)));
    layers_.push_back(std::move(kv));
  }
  bytes_ = bytes_for(shape, dtype_size(backend.kv_dtype()));
  for (int64_t p = shape.num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
  return absl::OkStatus();
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

uint64_t KvCache::bytes_for(const KvCacheShape& s, uint64_t element_bytes) {
  uint64_t heads = 0;
  for (int64_t h : s.layer_kv_heads) heads += static_cast<uint64_t>(h);
  return 2ull * heads * s.num_pages * s.page_size * s.head_dim * element_bytes;
}

}  // namespace exl3
