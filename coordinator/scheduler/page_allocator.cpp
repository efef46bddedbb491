// PageAllocator (see page_allocator.h).
#include "coordinator/scheduler/page_allocator.h"

#include "kernels/check.h"

namespace exl3 {

PageAllocator::PageAllocator(int32_t num_pages) : num_pages_(num_pages) {
  EXL3_CHECK(num_pages > 0, "num_pages ", num_pages);
  for (int32_t p = 0; p < num_pages; ++p) free_.insert(free_.end(), p);
}

bool PageAllocator::allocate(int32_t count, std::vector<int32_t>& pages) {
  EXL3_CHECK(count >= 0, "count ", count);
  if (count > free_pages()) return false;
  for (int32_t i = 0; i < count; ++i) {
    pages.push_back(*free_.begin());
    free_.erase(free_.begin());
  }
  return true;
}

void PageAllocator::release(std::vector<int32_t>& pages) {
  for (const int32_t page : pages) {
    EXL3_CHECK(page >= 0 && page < num_pages_, "page ", page, " of ", num_pages_);
    const bool inserted = free_.insert(page).second;
    EXL3_CHECK(inserted, "page ", page, " released twice");
  }
  pages.clear();
}

}  // namespace exl3
