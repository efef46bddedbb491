// Worker registration, command sessions and group-wide calls with deadlines.
#include "coordinator/server/worker_group.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

// How long the session end of a rank that reported a failed command waits for another rank's
// session to break (that rank is then the one named as lost).
constexpr std::chrono::milliseconds kStoppedRankGrace{2000};

}  // namespace

WorkerGroup::WorkerGroup(int world_size, std::string run_id)
    : world_size_(world_size), run_id_(std::move(run_id)), ranks_(world_size) {
  watchdog_ = std::thread([this] { watch_writes(); });
}

WorkerGroup::~WorkerGroup() {
  {
    std::lock_guard lock(mu_);
    stop_watchdog_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void WorkerGroup::begin_writes(std::chrono::milliseconds timeout, uint64_t command_id) {
  std::lock_guard lock(mu_);
  writes_deadline_ = std::chrono::steady_clock::now() + timeout;
  writes_timeout_ = timeout;
  writes_command_ = command_id;
  cv_.notify_all();
}

void WorkerGroup::end_writes() {
  std::lock_guard lock(mu_);
  writes_deadline_.reset();
}

// Wakes when writes begin, or on their deadline: a write still blocked then (the worker does not
// read; gRPC's flow control holds the writer) fails the group and cancels every session, which
// makes the blocked Write return.
void WorkerGroup::watch_writes() {
  std::unique_lock lock(mu_);
  while (!stop_watchdog_) {
    if (!writes_deadline_) {
      cv_.wait(lock, [&] { return stop_watchdog_ || writes_deadline_.has_value(); });
      continue;
    }
    const auto deadline = *writes_deadline_;
    if (cv_.wait_until(lock, deadline, [&] { return stop_watchdog_ || writes_deadline_ != deadline; })) continue;
    if (failure_.ok()) {
      failure_ = absl::DeadlineExceededError(absl::StrCat("writing command ", writes_command_, " to the workers took over ",
                                                          writes_timeout_.count(), " ms (a worker is not reading)"));
      std::fprintf(stderr, "coordinator: %s\n", std::string(failure_.message()).c_str());
    }
    for (Rank& r : ranks_) {
      if (r.session_open && r.context != nullptr) r.context->TryCancel();
    }
    writes_deadline_.reset();
    cv_.notify_all();
  }
}

std::string WorkerGroup::describe_rank(int rank) const {
  const Rank& r = ranks_[rank];
  std::string out = absl::StrCat("worker rank ", rank);
  if (r.registered && !r.registration.hostname().empty()) absl::StrAppend(&out, " on ", r.registration.hostname());
  if (!r.peer.empty()) absl::StrAppend(&out, " (", r.peer, ")");
  return out;
}

std::vector<std::string> WorkerGroup::rank_names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (int r = 0; r < world_size_; ++r) out.push_back(describe_rank(r));
  return out;
}

grpc::Status WorkerGroup::on_register(const pb::RegisterRequest& request, pb::RegisterResponse* response) {
  std::lock_guard lock(mu_);
  if (closed_ || !failure_.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker group is closed");
  if (request.world_size() != world_size_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("world_size ", request.world_size(), " but the coordinator expects ", world_size_));
  }
  if (request.rank() < 0 || request.rank() >= world_size_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("rank ", request.rank(), " outside [0, ", world_size_, ")"));
  }
  Rank& r = ranks_[request.rank()];
  if (r.registered) {
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, absl::StrCat("rank ", request.rank(), " is already registered"));
  }
  r.registered = true;
  r.registration = request;
  response->set_run_id(run_id_);
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status WorkerGroup::run_session(grpc::ServerContext* context,
                                      grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>* stream) {
  pb::WorkerMessage msg;
  if (!stream->Read(&msg) || !msg.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a session must start with SessionHello");
  }
  const int rank = msg.hello().rank();
  {
    std::lock_guard lock(mu_);
    if (msg.hello().run_id() != run_id_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "session for another run of the group");
    }
    if (rank < 0 || rank >= world_size_ || !ranks_[rank].registered || ranks_[rank].session_open) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("unexpected session for rank ", rank));
    }
    ranks_[rank].stream = stream;
    ranks_[rank].context = context;
    ranks_[rank].session_open = true;
    ranks_[rank].peer = context->peer();
    cv_.notify_all();
  }
  std::string reported_error;  // the last failed result this rank sent
  while (stream->Read(&msg)) {
    if (!msg.has_result()) continue;
    std::lock_guard lock(mu_);
    if (msg.result().code() != 0) reported_error = msg.result().message();
    auto pending = pending_.find(msg.result().command_id());
    if (pending != pending_.end() && pending->second[rank] == std::nullopt) {
      pending->second[rank] = msg.result();
      cv_.notify_all();
    }
  }
  {
    std::unique_lock lock(mu_);
    const auto expected = [&] { return closed_ || shutting_down_ || !failure_.ok(); };
    if (!expected() && !reported_error.empty()) {
      // A worker whose step failed (a collective that lost a peer) reports it and stops. The
      // peer it lost is the rank to blame: wait a little for that session to break first.
      cv_.wait_for(lock, kStoppedRankGrace, expected);
      if (!expected()) {
        failure_ = absl::UnavailableError(
            absl::StrCat(describe_rank(rank), " stopped after a failed command: ", reported_error));
        std::fprintf(stderr, "coordinator: %s\n", std::string(failure_.message()).c_str());
      }
    } else if (!expected()) {
      failure_ = absl::UnavailableError(absl::StrCat(describe_rank(rank), " disconnected",
                                                     context->IsCancelled() ? " (session cancelled)" : ""));
      std::fprintf(stderr, "coordinator: %s\n", std::string(failure_.message()).c_str());
    }
    cv_.notify_all();
  }
  // No writer may hold this stream once the handler returns.
  std::lock_guard write_lock(write_mu_);
  std::lock_guard lock(mu_);
  ranks_[rank].session_open = false;
  ranks_[rank].stream = nullptr;
  ranks_[rank].context = nullptr;
  cv_.notify_all();
  return grpc::Status::OK;
}

absl::Status WorkerGroup::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  const bool ready = cv_.wait_for(lock, timeout, [&] {
    if (!failure_.ok() || closed_) return true;
    for (const Rank& r : ranks_) {
      if (!r.session_open) return false;
    }
    return true;
  });
  if (!failure_.ok()) return failure_;
  if (closed_) return absl::CancelledError("the worker group was closed");
  if (!ready) {
    std::vector<int> missing;
    for (int i = 0; i < world_size_; ++i) {
      if (!ranks_[i].session_open) missing.push_back(i);
    }
    return absl::DeadlineExceededError(absl::StrCat("workers did not connect within ", timeout.count() / 1000.0,
                                                    " s: missing rank(s) ", absl::StrJoin(missing, ", ")));
  }
  return absl::OkStatus();
}

std::vector<pb::RegisterRequest> WorkerGroup::registrations() const {
  std::lock_guard lock(mu_);
  std::vector<pb::RegisterRequest> out;
  for (const Rank& r : ranks_) out.push_back(r.registration);
  return out;
}

absl::StatusOr<std::vector<pb::CommandResult>> WorkerGroup::call_all(const pb::Command& command,
                                                                     std::chrono::milliseconds timeout) {
  return call(std::vector<pb::Command>(world_size_, command), timeout);
}

absl::StatusOr<std::vector<pb::CommandResult>> WorkerGroup::call(std::vector<pb::Command> commands,
                                                                 std::chrono::milliseconds timeout) {
  EXL3_ASSIGN_OR_RETURN(const uint64_t id, send(std::move(commands), timeout));
  return collect(id, timeout);
}

absl::StatusOr<uint64_t> WorkerGroup::send_all(const pb::Command& command, std::chrono::milliseconds timeout) {
  return send(std::vector<pb::Command>(world_size_, command), timeout);
}

absl::StatusOr<uint64_t> WorkerGroup::send(std::vector<pb::Command> commands, std::chrono::milliseconds timeout) {
  std::lock_guard send_lock(send_mu_);
  uint64_t id = 0;
  std::lock_guard write_lock(write_mu_);
  std::vector<grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>*> streams;
  {
    std::lock_guard lock(mu_);
    if (!failure_.ok()) return failure_;
    if (closed_) return absl::UnavailableError("the worker group is shut down");
    id = next_command_id_++;
    pending_[id].assign(world_size_, std::nullopt);
    for (const Rank& r : ranks_) streams.push_back(r.stream);
  }
  begin_writes(timeout, id);
  for (int i = 0; i < world_size_; ++i) {
    commands[i].set_command_id(id);
    if (streams[i] == nullptr || !streams[i]->Write(commands[i])) {
      end_writes();
      std::string who;
      {
        std::lock_guard lock(mu_);
        who = describe_rank(i);
      }
      fail(absl::UnavailableError(absl::StrCat(who, " is not reachable")));
      return failure();
    }
  }
  end_writes();
  return id;
}

absl::StatusOr<std::vector<pb::CommandResult>> WorkerGroup::collect(uint64_t id, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto pending = pending_.find(id);
  if (pending == pending_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("command ", id, " was not sent or was already collected"));
  }
  const bool done = cv_.wait_for(lock, timeout, [&] {
    if (!failure_.ok() || closed_) return true;
    for (const auto& r : pending->second) {
      if (!r) return false;
    }
    return true;
  });
  const std::vector<std::optional<pb::CommandResult>> received = std::move(pending->second);
  pending_.erase(pending);
  if (!failure_.ok()) return failure_;
  if (closed_) return absl::UnavailableError("the worker group is shut down");
  if (!done) {
    std::vector<int> late;
    for (int i = 0; i < world_size_; ++i) {
      if (!received[i]) late.push_back(i);
    }
    failure_ = absl::DeadlineExceededError(absl::StrCat("worker rank(s) ", absl::StrJoin(late, ", "),
                                                        " did not answer command ", id, " within ", timeout.count(),
                                                        " ms"));
    cv_.notify_all();
    return failure_;
  }
  std::vector<pb::CommandResult> results;
  for (int i = 0; i < world_size_; ++i) {
    const pb::CommandResult& r = *received[i];
    if (r.code() != 0) {
      return absl::Status(static_cast<absl::StatusCode>(r.code()), absl::StrCat("rank ", i, ": ", r.message()));
    }
    results.push_back(r);
  }
  return results;
}

void WorkerGroup::fail(const absl::Status& reason) {
  std::lock_guard lock(mu_);
  if (failure_.ok()) failure_ = reason;
  cv_.notify_all();
}

absl::Status WorkerGroup::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void WorkerGroup::shutdown(const std::string& reason, std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mu_);
    shutting_down_ = true;
  }
  {
    std::lock_guard write_lock(write_mu_);
    std::vector<grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>*> streams;
    {
      std::lock_guard lock(mu_);
      for (const Rank& r : ranks_) streams.push_back(r.session_open ? r.stream : nullptr);
    }
    pb::Command cmd;
    cmd.set_command_id(0);
    cmd.mutable_shutdown()->set_reason(reason);
    begin_writes(timeout, 0);
    for (auto* s : streams) {
      if (s != nullptr) s->Write(cmd);
    }
    end_writes();
  }
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    for (const Rank& r : ranks_) {
      if (r.session_open) return false;
    }
    return true;
  });
  closed_ = true;
  cv_.notify_all();
}

}  // namespace exl3
