// InMemoryStore: the rendezvous key/value store kept in one process. The coordinator serves it to
// its workers over gRPC (see grpc_store.h); tests share one instance between rank threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace exl3 {

// Thread-safe. set() overwrites an existing key and wakes every waiting get(). get() waits until
// every key exists, with a real deadline: DEADLINE_EXCEEDED names the keys still missing; a
// non-positive timeout checks once without waiting. After close(), get() and set() return
// CANCELLED at once (waiters wake up), so a server can shut down without waiting out timeouts.
class InMemoryStore : public RendezvousStore {
 public:
  InMemoryStore() = default;
  InMemoryStore(const InMemoryStore&) = delete;
  InMemoryStore& operator=(const InMemoryStore&) = delete;

  absl::Status set(const std::string& key, const std::vector<char>& value) override;
  absl::StatusOr<std::vector<std::vector<char>>> get(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) override;

  // Removes every key that starts with `prefix` (a finished run of a group); returns how many.
  size_t erase_prefix(const std::string& prefix);
  // Wakes all waiters; every later call returns CANCELLED.
  void close();
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
  bool closed_ = false;
};

}  // namespace exl3
