// KvCache: per-layer K/V storage in fixed-size pages (allocated once on a Backend) with a free list;
// a sequence owns a page table (logical page i of the sequence -> physical page). Page size is a
// parameter. Keys and values are each kept at full precision (16: pages of the backend's kv_dtype)
// or quantized (2..8 bits: I32 bit-plane words and F16 group scales, exl3-format.md §9), chosen
// independently (KvCacheBits); the layers' PagedKv also carry the model's sliding window.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/kv_cache_bits.h"

namespace exl3 {

struct KvCacheShape {
  std::vector<int64_t> layer_kv_heads;  // KV heads this rank holds, per model layer (0 = none)
  int64_t head_dim = 0;
  int64_t num_pages = 0;
  int64_t page_size = 256;
  int k_bits = 16;  // 16 = full precision (kv_dtype pages); 2..8 = quantized words + scales
  int v_bits = 16;
  int64_t window = 0;  // sliding-window attention (PagedKv::window); 0 = full causal

  KvCacheBits bits() const { return {k_bits, v_bits}; }
};

// Physical pages owned by one sequence, in order.
struct PageTable {
  std::vector<int32_t> pages;
  int64_t capacity(int64_t page_size) const { return static_cast<int64_t>(pages.size()) * page_size; }
};

class KvCache {
 public:
  // Allocates the pages on `backend`; RESOURCE_EXHAUSTED past the backend's cap, INVALID_ARGUMENT
  // for a shape validate() refuses.
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
  // Copies physical page `src` onto page `dst` in every layer (keys and values, whichever tensors
  // the layer stores: pages, or quantized words and scales), on `backend`'s stream. Prefix reuse's
  // copy-on-write; the pages are the coordinator's (the free list is untouched).
  void copy_page(int32_t src, int32_t dst, Backend& backend);
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  // Bytes of K and V storage for a cache of this shape: full-precision parts with elements of
  // `element_bytes`, quantized parts as words and scales (kv_token_bytes).
  static uint64_t bytes_for(const KvCacheShape& shape, uint64_t element_bytes);
  // INVALID_ARGUMENT (saying why) for widths other than 2..8 / 16, or a quantized width when a
  // held layer's KV heads x head_dim is not a multiple of 32.
  static absl::Status validate(const KvCacheShape& shape);
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
