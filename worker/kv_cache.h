// KvCache: per-layer K/V storage in fixed-size pages with a free list; a sequence owns a page
// table (logical page i of the sequence -> physical page). Page size is a parameter.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/ops.h"

namespace exl3 {

struct KvCacheShape {
  std::vector<int64_t> layer_kv_heads;  // KV heads this rank holds, per model layer (0 = none)
  int64_t head_dim = 0;
  int64_t num_pages = 0;
  int64_t page_size = 256;
};

// Physical pages owned by one sequence, in order.
struct PageTable {
  std::vector<int32_t> pages;
  int64_t capacity(int64_t page_size) const { return static_cast<int64_t>(pages.size()) * page_size; }
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  PagedKv& layer(int64_t i) { return layers_.at(i); }
  const PagedKv& layer(int64_t i) const { return layers_.at(i); }

  // Grows `table` so it holds at least `tokens` positions. RESOURCE_EXHAUSTED (nothing taken)
  // when too few pages are free.
  absl::Status reserve(PageTable& table, int64_t tokens);
  // Returns every page of `table` to the free list and clears it.
  void release(PageTable& table);
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  // Bytes of K and V storage for a cache of this shape (fp32 on the CPU backend).
  static uint64_t bytes_for(const KvCacheShape& shape);

 private:
  KvCacheShape shape_;
  std::vector<PagedKv> layers_;
  std::vector<int32_t> free_;  // stack of free physical pages
};

}  // namespace exl3
