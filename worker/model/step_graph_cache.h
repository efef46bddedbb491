// StepGraphCache: the step graphs one model has captured (Backend::capture_step), one per batch
// bucket, looked up by what the graph bakes in: the bucket's sizes, the KV cache's pages and the
// communicator. Bounded: beyond its capacity the least recently used graph is dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"

namespace exl3 {

struct StepGraphKey {
  int64_t seqs = 0;            // sequences of one token each (exact: no padded rows)
  int64_t pages = 0;           // page-table columns: the bucket, a power of two
  uint64_t cache_id = 0;       // KvCache::id(): the graph holds that cache's page pointers
  const void* comm = nullptr;  // the communicator whose collectives the graph holds (null: none)

  bool operator==(const StepGraphKey&) const = default;
};

class StepGraphCache {
 public:
  explicit StepGraphCache(size_t capacity = 64) : capacity_(capacity) {}

  // The graph of `key`, marked as just used; null when none was captured.
  StepGraph* find(const StepGraphKey& key);
  // True when insert() would drop a graph to make room (the caller makes sure none is running).
  bool full() const { return entries_.size() >= capacity_; }
  // Adds `graph` under `key` (dropping the least recently used one when full) and returns it.
  StepGraph& insert(const StepGraphKey& key, std::unique_ptr<StepGraph> graph);
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    StepGraphKey key;
    std::unique_ptr<StepGraph> graph;
    uint64_t last_use = 0;
  };
  size_t capacity_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace exl3
