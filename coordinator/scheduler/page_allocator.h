// PageAllocator: the coordinator's book of physical KV cache pages. Every rank's KvCache has the
// same num_pages, and the page tables the scheduler sends index them, so this one allocator decides
// for all ranks. Deterministic: pages are handed out lowest index first from a sorted free set.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace exl3 {

class PageAllocator {
 public:
  explicit PageAllocator(int32_t num_pages);

  int32_t num_pages() const { return num_pages_; }
  int32_t free_pages() const { return static_cast<int32_t>(free_.size()); }

  // Appends `count` free pages to `pages` and returns true, or changes nothing and returns false
  // when fewer than `count` are free.
  bool allocate(int32_t count, std::vector<int32_t>& pages);

  // Returns every page of `pages` to the free set and clears it. Each must be allocated (checked).
  void release(std::vector<int32_t>& pages);

  bool is_free(int32_t page) const { return free_.count(page) != 0; }

 private:
  int32_t num_pages_;
  std::set<int32_t> free_;
};

// Pages needed to hold `positions` KV positions.
inline int32_t pages_for(int64_t positions, int32_t page_size) {
  return static_cast<int32_t>((positions + page_size - 1) / page_size);
}

}  // namespace exl3
