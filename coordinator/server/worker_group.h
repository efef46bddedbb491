// WorkerGroup: the coordinator's view of its workers. Registration and the per-worker command
// sessions arrive through the Control service; the coordinator sends a command to every rank
// and waits for all results under a deadline. A worker whose session breaks (its process died,
// or its link did: the control server's keepalive pings close a silent connection within about
// 3 s, see Coordinator::start_control) fails the group at once: pending and later calls return
// UNAVAILABLE naming the rank, its host and its address (a rank that reported a failed step and
// stopped is named only when no other rank's session breaks within 2 s: it lost a peer). Writes to the sessions have
// the call's deadline too: a watchdog cancels every session when a write (a worker not reading)
// outlasts it, which fails the group with DEADLINE_EXCEEDED.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/worker.grpc.pb.h"

namespace exl3 {

namespace pb = control::v1;

class WorkerGroup {
 public:
  WorkerGroup(int world_size, std::string run_id);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  int world_size() const { return world_size_; }
  const std::string& run_id() const { return run_id_; }

  // Control service side.
  grpc::Status on_register(const pb::RegisterRequest& request, pb::RegisterResponse* response);
  // Serves rank's session on the calling gRPC thread until the stream ends or the group closes.
  grpc::Status run_session(grpc::ServerContext* context, grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>* stream);

  // Coordinator side. Waits until every rank registered and opened its session.
  absl::Status wait_ready(std::chrono::milliseconds timeout);
  std::vector<pb::RegisterRequest> registrations() const;
  // "worker rank R on HOST (PEER)" of every rank, for messages about one rank.
  std::vector<std::string> rank_names() const;
  // Sends commands[r] to rank r (command ids are assigned here) and waits for every result.
  // Returns the results by rank, or the first error: a worker's non-OK result, a lost worker
  // (UNAVAILABLE) or the deadline (DEADLINE_EXCEEDED naming the ranks that did not answer).
  absl::StatusOr<std::vector<pb::CommandResult>> call(std::vector<pb::Command> commands,
                                                      std::chrono::milliseconds timeout);
  absl::StatusOr<std::vector<pb::CommandResult>> call_all(const pb::Command& command, std::chrono::milliseconds timeout);
  // call() in two halves, so several commands can be in flight (the serving loop's step pipeline):
  // send() writes commands[r] to rank r (the writes under `timeout`, as in call()) and returns the
  // command id; collect(id) waits up to `timeout` for every rank's result of a sent command, with
  // call()'s errors. Every sent id must be collected once (or the group fail): results of commands
  // in flight are kept until then. Ranks answer in the order commands were sent.
  absl::StatusOr<uint64_t> send(std::vector<pb::Command> commands, std::chrono::milliseconds timeout);
  absl::StatusOr<uint64_t> send_all(const pb::Command& command, std::chrono::milliseconds timeout);
  absl::StatusOr<std::vector<pb::CommandResult>> collect(uint64_t id, std::chrono::milliseconds timeout);

  // Marks the group failed (first reason wins) and wakes every waiter.
  void fail(const absl::Status& reason);
  absl::Status failure() const;
  // Sends Shutdown to every live session, waits up to `timeout` for the sessions to end, then
  // closes the group (sessions return).
  void shutdown(const std::string& reason, std::chrono::milliseconds timeout);

 private:
  struct Rank {
    bool registered = false;
    pb::RegisterRequest registration;
    grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>* stream = nullptr;
    grpc::ServerContext* context = nullptr;  // of the open session, to cancel a stuck write
    bool session_open = false;
    std::string peer;  // the session's remote address, as gRPC names it ("ipv4:10.0.0.2:41234")
  };

  // "worker rank R on HOST (PEER)" for failure messages: the host it registered from and the
  // address its session came from (hosts in one machine's network namespaces share a hostname).
  // Requires mu_.
  std::string describe_rank(int rank) const;

  // Marks writes to the sessions as in progress until `timeout` from now (end_writes() clears).
  void begin_writes(std::chrono::milliseconds timeout, uint64_t command_id);
  void end_writes();
  void watch_writes();

  const int world_size_;
  const std::string run_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Rank> ranks_;
  std::mutex send_mu_;   // one group-wide send at a time (command ids go out in order)
  std::mutex write_mu_;  // held while writing to session streams; a session ends only without it
  absl::Status failure_;
  bool closed_ = false;
  bool shutting_down_ = false;  // sessions ending now are expected
  uint64_t next_command_id_ = 1;
  // The commands in flight (sent, not collected): their results by rank, received so far.
  std::map<uint64_t, std::vector<std::optional<pb::CommandResult>>> pending_;
  // The write watchdog: writes_deadline_ is the time by which the writes in progress must end
  // (unset when none is in progress).
  std::optional<std::chrono::steady_clock::time_point> writes_deadline_;
  std::chrono::milliseconds writes_timeout_{0};
  uint64_t writes_command_ = 0;
  bool stop_watchdog_ = false;
  std::thread watchdog_;
};

}  // namespace exl3
