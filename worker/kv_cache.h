// KvCache: per-layer K/V storage in fixed-size pages (allocated once on a Backend, in its kv_dtype)
// with a free list; a sequence owns a page table (logical page i of the sequence -> physical page).
// Page size is a parameter.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

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
  // Allocates the pages on `backend`; RESOURCE_EXHAUSTED past the backend's cap.
  static absl::StatusOr<std::unique_ptr<KvCache>> create(const KvCacheShape& shape, Backend& backend);
  // The same for tools and tests: aborts when the allocation fails.
  KvCache(const KvCacheShape& shape, Backend& backend);

  const KvCacheShape& shape() const { return shape_; }
  // Unique in the process, never reused: what a captured step graph (which holds this cache's page
  // pointers) is keyed by, so that another cache, even at the same address, never replays it.
  uint64_t id() const { return id_; }
  PagedKv& layer(int64_t i) { return layers_.at(i); }
  const PagedKv& layer(int64_t i) const { return layers_.at(i); }

  // Grows `table` so it holds at least `tokens` positions. RESOURCE_EXHAUSTED (nothing taken)
  // when too few pages are free.
  absl::Status reserve(PageTable& table, int64_t tokens);
  // Returns every page of `table` to the free list and clears it.
  void release(PageTable& table);
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  // Bytes of K and V storage for a cache of this shape with elements of `element_bytes`.
  static uint64_t bytes_for(const KvCacheShape& shape, uint64_t element_bytes);
  uint64_t bytes() const { return bytes_; }

 private:
  KvCache() = default;
  absl::Status allocate(Backend& backend);

  static uint64_t next_id();

  uint64_t id_ = next_id();
  KvCacheShape shape_;
  std::vector<PagedKv> layers_;
  std::vector<int32_t> free_;  // stack of free physical pages
  uint64_t bytes_ = 0;
};

}  // namespace exl3
