// Lookup, insertion and least-recently-used eviction of a model's step graphs.
#include "worker/model/step_graph_cache.h"

#include <algorithm>

#include "kernels/check.h"

namespace exl3 {

StepGraph* StepGraphCache::find(const StepGraphKey& key) {
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.last_use = ++clock_;
      return e.graph.get();
    }
  }
  return nullptr;
}

StepGraph& StepGraphCache::insert(const StepGraphKey& key, std::unique_ptr<StepGraph> graph) {
  EXL3_CHECK(graph != nullptr, "StepGraphCache::insert of a null graph");
  EXL3_CHECK(capacity_ > 0, "StepGraphCache of capacity 0");
  std::erase_if(entries_, [&](const Entry& e) { return e.key == key; });
  if (entries_.size() >= capacity_) {
    const auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                         [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    entries_.erase(oldest);
  }
  entries_.push_back(Entry{key, std::move(graph), ++clock_});
  return *entries_.back().graph;
}

}  // namespace exl3
