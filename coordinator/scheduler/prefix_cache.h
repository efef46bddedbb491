// PrefixCache: the coordinator's book of KV pages with prefix reuse. It owns the PageAllocator and
// adds, per page, a reference count (running sequences holding it, plus pins while a step is being
// planned) and, for pages holding computed KV of a known token chain, an entry in a content index:
//
//  - An entry describes one physical page: the tokens whose KV it holds (its first n <= page_size
//    positions), the entry of the page before it in the chain (parent; 0 = the chain's start) and
//    chain_hash = hash(parent's chain_hash, the n tokens). Full entries (n = page_size) are found
//    by chain_hash; every entry is also listed under its parent, for copy-on-write of a partial
//    match. A hash only finds candidates: every match compares the tokens and the parent exactly.
//  - A page is free (no references, no entry), held (references > 0, with or without an entry) or
//    cached (no references, an entry): cached pages are evicted least recently used first, and only
//    when an allocation needs more pages than are free. available() = free + cached.
//  - A sequence's pages get entries as its positions are computed (record(), after each step), so
//    a running sequence's partly filled last page can already be the source of a copy: positions a
//    sequence has computed are never written again.
//  - Sharing is read-only: a full page of the chain is shared by reference; the first differing
//    page is never shared, the new sequence gets a fresh page that the workers copy from a cached
//    one (its common first c tokens) before the step runs.
//
// With reuse disabled there are no entries: every page is free or held by one sequence.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/scheduler/page_allocator.h"

namespace exl3 {

// A sequence's position in the content index: the entry id of each of its full logical pages
// (which may be another physical page with the same content), and how many of its positions have
// been recorded.
struct PrefixChain {
  std::vector<uint64_t> ids;
  std::vector<uint64_t> hashes;  // their chain hashes
  int32_t recorded = 0;
};

// What admission may reuse for a token sequence.
struct PrefixMatch {
  std::vector<int32_t> shared_pages;  // full pages shared read-only, logical pages 0, 1, ...
  PrefixChain chain;                  // their entry ids and hashes; recorded = their positions
  int32_t copy_source = -1;           // page to copy for the next logical page, or -1
  int32_t copy_tokens = 0;            // its first copy_tokens positions are reused (0 when none)

  int32_t tokens(int32_t page_size) const {
    return static_cast<int32_t>(shared_pages.size()) * page_size + copy_tokens;
  }
};

struct PageCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

class PrefixCache {
 public:
  PrefixCache(int32_t num_pages, int32_t page_size, bool enabled);

  bool enabled() const { return enabled_; }
  int32_t num_pages() const { return pages_.num_pages(); }
  int32_t page_size() const { return page_size_; }
  int32_t free_pages() const { return pages_.free_pages(); }
  int32_t cached_pages() const { return static_cast<int32_t>(lru_.size()); }
  // Pages an allocation may take: free ones, then cached ones (evicted).
  int32_t available() const { return free_pages() + cached_pages(); }
  // Pages with more than one owner, counting the cache (an entry) as an owner.
  int32_t shared_pages() const;
  int32_t references(int32_t page) const { return refs_.at(page); }
  bool has_entry(int32_t page) const { return entry_of_page_.at(page) != 0; }

  // The longest reusable prefix of tokens[0, max_tokens): whole full pages along the chain, then
  // the cached page continuing it that shares the longest common prefix with the next tokens.
  // Changes nothing. Empty when disabled.
  PrefixMatch match(std::span<const int32_t> tokens, int32_t max_tokens) const;
  // Cached pages of `match` (shared pages and the copy source): taking it makes them unavailable.
  int32_t cached_in(const PrefixMatch& match) const;

  // Takes a reference on every shared page of `match` (appending them to `pages`) and pins its
  // copy source until unpin_all(), so that no allocation of this plan evicts it.
  void acquire(const PrefixMatch& match, std::vector<int32_t>& pages);
  // Pins a held page (one more reference) until unpin_all(): the source of a copy that a later
  // plan carries (a rewind's copy-on-write), so that no allocation evicts it before then.
  void pin(int32_t page);
  // Drops one pin of `page` (the copy it was pinned for will not run).
  void unpin(int32_t page);
  void unpin_all();
  // Appends `count` pages (free ones first, lowest index; then evicting cached pages least recently
  // used first), each with one reference; false (nothing changed) when fewer are available.
  bool allocate(int32_t count, std::vector<int32_t>& pages);
  // Drops a reference on every page of `pages` (clearing it): a page without references becomes
  // cached when it has an entry, free otherwise. The last logical page becomes least recent, so the
  // tail of a chain is evicted before its head.
  void release(std::vector<int32_t>& pages);

  // Records that positions [chain.recorded, computed) of the sequence with `tokens` and `pages`
  // hold computed KV (positions already recorded are skipped). No-op when disabled.
  void record(std::span<const int32_t> tokens, const std::vector<int32_t>& pages, int32_t computed,
              PrefixChain& chain);

  // OK, or INTERNAL naming the first broken invariant of the book: every page is exactly one of
  // free / held / cached; `holders[p]` (references the caller's sequences hold) equals each page's
  // count; entries hash their tokens, sit in the indexes they belong to, and cached ones in the LRU.
  absl::Status check(const std::vector<int32_t>& holders) const;
  // The tokens of page `page`'s entry (empty when none), for the caller's checks.
  std::span<const int32_t> entry_tokens(int32_t page) const;

 private:
  struct Entry {
    uint64_t id = 0;
    int32_t page = -1;
    uint64_t parent = 0;       // entry id of the previous page of the chain; 0 = first page
    uint64_t parent_hash = 0;  // its chain_hash (kept when the parent is evicted)
    uint64_t chain_hash = 0;
    std::vector<int32_t> tokens;
  };

  static uint64_t hash_page(uint64_t parent_hash, std::span<const int32_t> tokens);
  const Entry* entry(uint64_t id) const;
  const Entry* full_child(uint64_t parent, uint64_t chain_hash, std::span<const int32_t> tokens) const;
  void add_reference(int32_t page);
  void evict(int32_t page);
  void remove_entry(int32_t page);

  bool enabled_;
  int32_t page_size_;
  PageAllocator pages_;
  std::vector<int32_t> refs_;
  std::vector<uint64_t> entry_of_page_;  // entry id per page; 0 = none
  std::unordered_map<uint64_t, Entry> entries_;
  std::unordered_multimap<uint64_t, uint64_t> full_;  // chain_hash -> entry ids of full pages
  std::map<uint64_t, std::set<uint64_t>> children_;   // parent entry id -> entry ids
  std::set<std::pair<uint64_t, int32_t>> lru_;        // (last use, page) of cached pages
  std::vector<uint64_t> last_use_;
  std::vector<int32_t> pinned_;
  uint64_t clock_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace exl3
