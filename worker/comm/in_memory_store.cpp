// InMemoryStore: a map guarded by one mutex, with a condition variable that get() waits on until
// its keys appear or its deadline passes.
#include "worker/comm/in_memory_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace exl3 {

namespace {

// Longer timeouts are clamped so that now() + timeout cannot overflow the clock.
constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24 * 365);

absl::Status closed_status() { return absl::CancelledError("rendezvous store is closed"); }

}  // namespace

absl::Status InMemoryStore::set(const std::string& key, const std::vector<char>& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return closed_status();
    values_[key] = value;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<char>>> InMemoryStore::get(
    const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + std::min(timeout, kMaxWait);
  std::unique_lock<std::mutex> lock(mutex_);
  const auto all_present = [&] {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  };
  changed_.wait_until(lock, deadline, [&] { return closed_ || all_present(); });
  if (closed_) return closed_status();
  if (!all_present()) {
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (!values_.contains(key)) missing.push_back(key);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous store: after ", timeout.count(), " ms still missing ",
                     missing.size(), " of ", keys.size(), " keys: ", absl::StrJoin(missing, ", ")));
  }
  std::vector<std::vector<char>> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(values_.at(key));
  return out;
}

size_t InMemoryStore::erase_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t erased = 0;
  for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.starts_with(prefix);) {
    it = values_.erase(it);
    ++erased;
  }
  return erased;
}

void InMemoryStore::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

size_t InMemoryStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return values_.size();
}

}  // namespace exl3
