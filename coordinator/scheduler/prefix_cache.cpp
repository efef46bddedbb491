// PrefixCache (see prefix_cache.h).
#include "coordinator/scheduler/prefix_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

constexpr uint64_t kRootHash = 0x243f6a8885a308d3ull;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Length of the common prefix of a and b.
int32_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int32_t>(i);
}

bool same(std::span<const int32_t> a, std::span<const int32_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

PrefixCache::PrefixCache(int32_t num_pages, int32_t page_size, bool enabled)
    : enabled_(enabled),
      page_size_(page_size),
      pages_(num_pages),
      refs_(num_pages, 0),
      entry_of_page_(num_pages, 0),
      last_use_(num_pages, 0) {
  EXL3_CHECK(page_size > 0, "page_size ", page_size);
}

uint64_t PrefixCache::hash_page(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent_hash ^ 0x6a09e667f3bcc908ull);
  for (const int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return mix(h ^ tokens.size());
}

const PrefixCache::Entry* PrefixCache::entry(uint64_t id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

const PrefixCache::Entry* PrefixCache::full_child(uint64_t parent, uint64_t chain_hash,
                                                  std::span<const int32_t> tokens) const {
  const auto [begin, end] = full_.equal_range(chain_hash);
  for (auto it = begin; it != end; ++it) {
    const Entry& e = entries_.at(it->second);
    if (e.parent == parent && same(e.tokens, tokens)) return &e;
  }
  return nullptr;
}

int32_t PrefixCache::shared_pages() const {
  int32_t n = 0;
  for (int32_t p = 0; p < num_pages(); ++p) {
    if (refs_[p] + (entry_of_page_[p] != 0 ? 1 : 0) > 1) ++n;
  }
  return n;
}

PrefixMatch PrefixCache::match(std::span<const int32_t> tokens, int32_t max_tokens) const {
  PrefixMatch m;
  max_tokens = std::min<int32_t>(max_tokens, static_cast<int32_t>(tokens.size()));
  if (!enabled_ || max_tokens <= 0) return m;
  uint64_t parent = 0, parent_hash = kRootHash;
  int32_t k = 0;
  while ((k + 1) * page_size_ <= max_tokens) {
    const std::span<const int32_t> page = tokens.subspan(static_cast<size_t>(k) * page_size_, page_size_);
    const uint64_t h = hash_page(parent_hash, page);
    const Entry* e = full_child(parent, h, page);
    if (e == nullptr) break;
    m.shared_pages.push_back(e->page);
    m.chain.ids.push_back(e->id);
    m.chain.hashes.push_back(h);
    parent = e->id;
    parent_hash = h;
    ++k;
  }
  m.chain.recorded = k * page_size_;
  const std::span<const int32_t> rest =
      tokens.subspan(static_cast<size_t>(k) * page_size_, static_cast<size_t>(max_tokens - k * page_size_));
  auto it = children_.find(parent);
  if (rest.empty() || it == children_.end()) return m;
  for (const uint64_t id : it->second) {  // ascending ids: the oldest entry wins a tie
    const Entry& e = entries_.at(id);
    const int32_t c = common_prefix(e.tokens, rest);
    if (c > m.copy_tokens) {
      m.copy_tokens = c;
      m.copy_source = e.page;
    }
  }
  return m;
}

int32_t PrefixCache::cached_in(const PrefixMatch& match) const {
  int32_t n = 0;
  for (const int32_t p : match.shared_pages) n += refs_[p] == 0 ? 1 : 0;
  if (match.copy_source >= 0 && refs_[match.copy_source] == 0) ++n;
  return n;
}

void PrefixCache::add_reference(int32_t page) {
  EXL3_CHECK(page >= 0 && page < num_pages() && !pages_.is_free(page), "reference to page ", page);
  if (refs_[page]++ == 0) {
    const size_t erased = lru_.erase({last_use_[page], page});
    EXL3_CHECK(erased == 1, "page ", page, " without references is not cached");
  }
}

void PrefixCache::acquire(const PrefixMatch& match, std::vector<int32_t>& pages) {
  for (const int32_t p : match.shared_pages) {
    add_reference(p);
    pages.push_back(p);
  }
  if (match.copy_source >= 0) {
    add_reference(match.copy_source);
    pinned_.push_back(match.copy_source);
  }
}

void PrefixCache::pin(int32_t page) {
  EXL3_CHECK(page >= 0 && page < num_pages() && refs_[page] > 0, "pinning page ", page, " that is not held");
  add_reference(page);
  pinned_.push_back(page);
}

void PrefixCache::unpin(int32_t page) {
  auto it = std::find(pinned_.begin(), pinned_.end(), page);
  EXL3_CHECK(it != pinned_.end(), "unpinning page ", page, " that is not pinned");
  pinned_.erase(it);
  std::vector<int32_t> one{page};
  release(one);
}

void PrefixCache::unpin_all() {
  release(pinned_);
}

void PrefixCache::remove_entry(int32_t page) {
  const uint64_t id = entry_of_page_[page];
  if (id == 0) return;
  const Entry& e = entries_.at(id);
  if (static_cast<int32_t>(e.tokens.size()) == page_size_) {
    const auto [begin, end] = full_.equal_range(e.chain_hash);
    for (auto it = begin; it != end; ++it) {
      if (it->second == id) {
        full_.erase(it);
        break;
      }
    }
  }
  auto children = children_.find(e.parent);
  children->second.erase(id);
  if (children->second.empty()) children_.erase(children);
  entries_.erase(id);
  entry_of_page_[page] = 0;
}

void PrefixCache::evict(int32_t page) {
  EXL3_CHECK(refs_[page] == 0 && entry_of_page_[page] != 0, "evicting page ", page, " that is not cached");
  lru_.erase({last_use_[page], page});
  remove_entry(page);
  std::vector<int32_t> one{page};
  pages_.release(one);
}

bool PrefixCache::allocate(int32_t count, std::vector<int32_t>& pages) {
  EXL3_CHECK(count >= 0, "count ", count);
  if (count > available()) return false;
  while (free_pages() < count) evict(lru_.begin()->second);
  const size_t first = pages.size();
  EXL3_CHECK(pages_.allocate(count, pages), "allocation after eviction");
  for (size_t i = first; i < pages.size(); ++i) refs_[pages[i]] = 1;
  return true;
}

void PrefixCache::release(std::vector<int32_t>& pages) {
  std::vector<int32_t> freed;
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) {
    const int32_t p = *it;
    EXL3_CHECK(p >= 0 && p < num_pages() && refs_[p] > 0, "releasing page ", p, " without a reference");
    if (--refs_[p] > 0) continue;
    if (entry_of_page_[p] != 0) {
      last_use_[p] = ++clock_;
      lru_.insert({last_use_[p], p});
    } else {
      freed.push_back(p);
    }
  }
  pages_.release(freed);
  pages.clear();
}

void PrefixCache::record(std::span<const int32_t> tokens, const std::vector<int32_t>& pages, int32_t computed,
                         PrefixChain& chain) {
  if (!enabled_) return;
  EXL3_CHECK(computed <= static_cast<int32_t>(tokens.size()) &&
                 static_cast<int64_t>(pages.size()) * page_size_ >= computed,
             "recording ", computed, " positions of ", tokens.size(), " tokens over ", pages.size(), " pages");
  while (chain.recorded < computed) {
    const int32_t k = chain.recorded / page_size_;
    const int32_t begin = k * page_size_;
    const int32_t end = std::min(begin + page_size_, computed);
    const std::span<const int32_t> page_tokens = tokens.subspan(begin, end - begin);
    EXL3_CHECK(static_cast<int32_t>(chain.ids.size()) == k, "chain of ", chain.ids.size(), " pages at page ", k);
    const uint64_t parent = k == 0 ? 0 : chain.ids[k - 1];
    const uint64_t parent_hash = k == 0 ? kRootHash : chain.hashes[k - 1];
    const int32_t page = pages[k];
    uint64_t id = entry_of_page_[page];
    bool was_full = false;
    if (id != 0) {
      Entry& e = entries_.at(id);
      EXL3_CHECK(e.parent == parent && e.tokens.size() <= page_tokens.size() &&
                     std::equal(e.tokens.begin(), e.tokens.end(), page_tokens.begin()),
                 "page ", page, " holds other tokens than the sequence computed there");
      was_full = static_cast<int32_t>(e.tokens.size()) == page_size_;
      if (e.tokens.size() < page_tokens.size()) {
        e.tokens.assign(page_tokens.begin(), page_tokens.end());
        e.chain_hash = hash_page(e.parent_hash, e.tokens);
      }
    } else {
      id = next_id_++;
      Entry e;
      e.id = id;
      e.page = page;
      e.parent = parent;
      e.parent_hash = parent_hash;
      e.tokens.assign(page_tokens.begin(), page_tokens.end());
      e.chain_hash = hash_page(parent_hash, e.tokens);
      entries_.emplace(id, std::move(e));
      entry_of_page_[page] = id;
      children_[parent].insert(id);
    }
    if (end - begin == page_size_) {
      const Entry& e = entries_.at(id);
      const uint64_t h = e.chain_hash;
      if (!was_full) {
        // The same chain may already be cached in another page (computed twice): keep that one and
        // continue the chain from it; this page is then plain storage of its sequence.
        const Entry* existing = full_child(parent, h, page_tokens);
        if (existing != nullptr) {
          id = existing->id;
          remove_entry(page);
        } else {
          full_.emplace(h, id);
        }
      }
      chain.ids.push_back(id);
      chain.hashes.push_back(h);
    }
    chain.recorded = end;
  }
}

std::span<const int32_t> PrefixCache::entry_tokens(int32_t page) const {
  const Entry* e = entry(entry_of_page_.at(page));
  return e == nullptr ? std::span<const int32_t>() : std::span<const int32_t>(e->tokens);
}

absl::Status PrefixCache::check(const std::vector<int32_t>& holders) const {
  auto broken = [](auto&&... parts) { return absl::InternalError(absl::StrCat("page book: ", parts...)); };
  if (static_cast<int32_t>(holders.size()) != num_pages()) return broken(holders.size(), " holder counts");
  std::vector<int32_t> pins(num_pages(), 0);
  for (const int32_t p : pinned_) ++pins[p];
  int32_t free = 0, held = 0, cached = 0;
  for (int32_t p = 0; p < num_pages(); ++p) {
    const bool in_lru = lru_.count({last_use_[p], p}) != 0;
    if (refs_[p] != holders[p] + pins[p]) {
      return broken("page ", p, " has ", refs_[p], " references but ", holders[p], " holders and ", pins[p], " pins");
    }
    if (pages_.is_free(p)) {
      if (refs_[p] != 0 || entry_of_page_[p] != 0 || in_lru) return broken("free page ", p, " is also in use");
      ++free;
    } else if (refs_[p] > 0) {
      if (in_lru) return broken("held page ", p, " is in the eviction list");
      ++held;
    } else {
      if (entry_of_page_[p] == 0 || !in_lru) return broken("page ", p, " is neither free, held nor cached");
      ++cached;
    }
    if (entry_of_page_[p] != 0 && !enabled_) return broken("page ", p, " has an entry with reuse disabled");
  }
  if (free + held + cached != num_pages() || cached != cached_pages()) {
    return broken(free, " free + ", held, " held + ", cached, " cached != ", num_pages(), " pages (", lru_.size(),
                  " in the eviction list)");
  }
  size_t full = 0;
  for (const auto& [id, e] : entries_) {
    const int32_t n = static_cast<int32_t>(e.tokens.size());
    if (e.id != id || entry_of_page_.at(e.page) != id) return broken("entry ", id, " is not its page's entry");
    if (n < 1 || n > page_size_) return broken("entry ", id, " holds ", n, " tokens");
    if (e.chain_hash != hash_page(e.parent_hash, e.tokens)) {
      return broken("page ", e.page, ": its tokens do not hash to its chain hash");
    }
    if (e.parent == 0 && e.parent_hash != kRootHash) return broken("entry ", id, " starts a chain off the root");
    if (const Entry* parent = entry(e.parent); parent != nullptr) {
      if (parent->chain_hash != e.parent_hash || static_cast<int32_t>(parent->tokens.size()) != page_size_) {
        return broken("entry ", id, " does not continue its parent ", e.parent);
      }
    }
    auto children = children_.find(e.parent);
    if (children == children_.end() || children->second.count(id) == 0) return broken("entry ", id, " not listed");
    if (n == page_size_) {
      ++full;
      const auto [begin, end] = full_.equal_range(e.chain_hash);
      if (std::none_of(begin, end, [&](const auto& kv) { return kv.second == id; })) {
        return broken("full entry ", id, " cannot be found by its hash");
      }
    }
  }
  if (full != full_.size()) return broken(full_.size(), " hash index rows for ", full, " full entries");
  size_t listed = 0;
  for (const auto& [parent, ids] : children_) listed += ids.size();
  if (listed != entries_.size()) return broken(listed, " listed children for ", entries_.size(), " entries");
  return absl::OkStatus();
}

}  // namespace exl3
