// Gloo backend of the Communicator (CPU workers): what it promises beyond communicator.h, and the
// adapter that lets Gloo's rendezvous run on our RendezvousStore with a real deadline.
//
// Behaviour of make_gloo_communicator (declared in communicator.h):
// - Rendezvous: each rank publishes its TCP addresses under "<prefix>/<rank>" and waits for every
//   other rank's key. All store waits share one deadline, options.timeout from the start of the
//   call; a rank that never joins gives DEADLINE_EXCEEDED naming its key. Each TCP connect after
//   the addresses are known is bounded by options.timeout as well.
// - Collectives: every Gloo wait has options.timeout. A peer whose socket closed (process gone,
//   communicator destroyed) gives UNAVAILABLE at once; a peer that does not answer (alive but not
//   taking part, or unreachable) gives DEADLINE_EXCEEDED. No Gloo exception leaves this backend,
//   and the SIGPIPE raised by writing to a dead peer is blocked in the calling thread and in
//   Gloo's event-loop thread (the process-wide disposition is left alone). After the first such error the communicator closes all its
//   connections (so its peers fail at once instead of waiting out their timeouts) and every later
//   call returns FAILED_PRECONDITION; the group must be torn down and made again.
// - Arguments that are wrong on this rank alone (a bad root or peer rank, all_gather counts that do
//   not add up) give INVALID_ARGUMENT before anything is sent, and the communicator stays usable.
//   Mismatches between ranks (different all_reduce lengths, a recv smaller than its send) cannot be
//   seen locally: they are contract violations, not checked.
// - send() is synchronous: it returns once the receiver has posted the matching recv() and the
//   data is written (Gloo's TCP transport waits for the receiver), so two ranks that both send to
//   each other first deadlock until the timeout. Order exchanges (e.g. even ranks send first).
// - Not thread-safe: one thread drives a communicator, and all ranks issue the same collectives in
//   the same order.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace exl3 {

// Thrown by GlooStoreAdapter through Gloo's rendezvous code (which only knows exceptions) and
// caught again at the communicator's edge, so the store's status survives the trip.
class GlooStoreError : public std::runtime_error {
 public:
  explicit GlooStoreError(absl::Status status)
      : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// gloo::rendezvous::Store over a RendezvousStore. Keys become "<prefix>/<key>". Every wait and get
// ends at `deadline`, whatever timeout Gloo passes (Gloo passes its context timeout per key; we
// want one deadline for the whole rendezvous). Failures throw GlooStoreError.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(RendezvousStore& store, std::string prefix,
                   std::chrono::steady_clock::time_point deadline);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::string full_key(const std::string& key) const;
  // Time left until the deadline, at least 1 ms (the store then reports what is missing).
  std::chrono::milliseconds remaining() const;

  RendezvousStore& store_;
  const std::string prefix_;
  const std::chrono::steady_clock::time_point deadline_;
};

}  // namespace exl3
