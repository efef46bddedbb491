// WorkerGroup: the coordinator's view of its workers. Registration and the per-worker command
// sessions arrive through the Control service; the coordinator sends a command to every rank
// and waits for all results under a deadline. A worker whose session breaks fails the group at
// once: pending and later calls return UNAVAILABLE naming the rank.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/worker.grpc.pb.h"

namespace exl3 {

namespace pb = control::v1;

class WorkerGroup {
 public:
  WorkerGroup(int world_size, std::string run_id);

  int world_size() const { return world_size_; }
  const std::string& run_id() const { return run_id_; }

  // Control service side.
  grpc::Status on_register(const pb::RegisterRequest& request, pb::RegisterResponse* response);
  // Serves rank's session on the calling gRPC thread until the stream ends or the group closes.
  grpc::Status run_session(grpc::ServerContext* context, grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>* stream);

  // Coordinator side. Waits until every rank registered and opened its session.
  absl::Status wait_ready(std::chrono::milliseconds timeout);
  std::vector<pb::RegisterRequest> registrations() const;
  // Sends commands[r] to rank r (command ids are assigned here) and waits for every result.
  // Returns the results by rank, or the first error: a worker's non-OK result, a lost worker
  // (UNAVAILABLE) or the deadline (DEADLINE_EXCEEDED naming the ranks that did not answer).
  absl::StatusOr<std::vector<pb::CommandResult>> call(std::vector<pb::Command> commands,
                                                      std::chrono::milliseconds timeout);
  absl::StatusOr<std::vector<pb::CommandResult>> call_all(const pb::Command& command, std::chrono::milliseconds timeout);

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
    bool session_open = false;
  };

  const int world_size_;
  const std::string run_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Rank> ranks_;
  std::mutex call_mu_;   // one group-wide call at a time
  std::mutex write_mu_;  // held while writing to session streams; a session ends only without it
  absl::Status failure_;
  bool closed_ = false;
  bool shutting_down_ = false;  // sessions ending now are expected
  uint64_t next_command_id_ = 1;
  // The one call in flight: its command id and the results received so far.
  uint64_t pending_id_ = 0;
  std::vector<std::optional<pb::CommandResult>> pending_results_;
};

}  // namespace exl3
