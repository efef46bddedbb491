// ProcessGroup: spawning, waiting for and stopping the launcher's children; see process_group.h.
#include "launch/process/process_group.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "launch/process/child_process.h"
#include "launch/process/output_pump.h"

namespace exl3 {
namespace {

// After SIGKILL a process normally disappears within milliseconds; 5 s means it is stuck in
// an uninterruptible kernel wait (for example a hung device driver).
constexpr auto kKillWait = std::chrono::seconds(5);
// How long the destructor lets the output thread drain the pipes after the children are gone.
constexpr auto kOutputDrain = std::chrono::seconds(2);

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

}  // namespace

std::string ChildExit::describe() const {
  std::string how = signal != 0
                        ? absl::StrCat("was killed by ", signal_name(signal), core_dumped ? " (core dumped)" : "")
                        : absl::StrCat("exited with code ", exit_code);
  return absl::StrCat(name, " (pid ", pid, ") ", how);
}

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(options) {}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::spawn(std::vector<ProcessSpec> specs,
                                                                  ProcessGroupOptions options) {
  std::unique_ptr<ProcessGroup> group(new ProcessGroup(options));
  const bool prefix = options.output == ChildOutput::kPrefixLines;
  std::vector<OutputPump::Source> sources;
  absl::Status status;
  for (size_t rank = 0; rank < specs.size(); ++rank) {
    ProcessSpec& spec = specs[rank];
    const std::string label = spec.label.empty() ? absl::StrCat("worker ", rank) : spec.label;
    ChildLaunch launch{std::move(spec.argv), std::move(spec.env), -1, -1};
    Pipe out, err;
    if (prefix) {
      absl::StatusOr<Pipe> o = make_pipe();
      if (!o.ok()) {
        status = o.status();
        break;
      }
      absl::StatusOr<Pipe> e = make_pipe();
      if (!e.ok()) {
        status = e.status();
        break;
      }
      out = std::move(*o);
      err = std::move(*e);
      launch.stdout_fd = out.write.get();
      launch.stderr_fd = err.write.get();
    }
    absl::StatusOr<StartedChild> started = start_child(launch);
    if (!started.ok()) {
      status = absl::Status(started.status().code(),
                            absl::StrCat("starting ", label, ": ", std::string(started.status().message())));
      break;
    }
    if (prefix) {
      const std::string line_prefix = absl::StrCat("[", label, "] ");
      sources.push_back({std::move(out.read), options.stdout_fd, line_prefix});
      sources.push_back({std::move(err.read), options.stderr_fd, line_prefix});
    }
    group->children_.push_back(Child{static_cast<int>(rank), started->pid, std::move(started->pidfd), label});
  }
  // Started even when a later child failed, so the output of those already running is kept.
  if (!sources.empty()) {
    absl::StatusOr<std::unique_ptr<OutputPump>> pump = OutputPump::start(std::move(sources));
    if (pump.ok()) {
      group->pump_ = std::move(*pump);
    } else if (status.ok()) {
      status = pump.status();
    }
  }
  if (status.ok()) return group;
  absl::StatusOr<std::vector<ChildExit>> stopped = group->terminate_all(options.teardown_grace);
  if (!stopped.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(std::string(status.message()),
                                     "; stopping the others also failed: ", std::string(stopped.status().message())));
  }
  return status;
}

ProcessGroup::~ProcessGroup() {
  if (pending_count() > 0) {
    absl::StatusOr<std::vector<ChildExit>> stopped = terminate_all(options_.teardown_grace);
    if (!stopped.ok())
      std::fprintf(stderr, "exl3: stopping children: %s\n", std::string(stopped.status().message()).c_str());
  }
  if (pump_ && !pump_->finish(ProcessClock::now() + kOutputDrain)) {
    std::fprintf(stderr, "exl3: child output still open %d s after the children exited; stopped reading it\n",
                 static_cast<int>(kOutputDrain.count()));
  }
}

pid_t ProcessGroup::pid(int rank) const {
  EXL3_CHECK(rank >= 0 && rank < size(), "rank ", rank, " of ", size());
  return children_[rank].pid;
}

std::vector<pid_t> ProcessGroup::pids() const {
  std::vector<pid_t> out;
  for (const Child& c : children_) out.push_back(c.pid);
  return out;
}

bool ProcessGroup::alive(int rank) const {
  EXL3_CHECK(rank >= 0 && rank < size(), "rank ", rank, " of ", size());
  const Child& c = children_[rank];
  if (!c.pidfd.valid()) return false;
  pollfd p{c.pidfd.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

int ProcessGroup::alive_count() const {
  int n = 0;
  for (int r = 0; r < size(); ++r) n += alive(r) ? 1 : 0;
  return n;
}

int ProcessGroup::pending_count() const {
  int n = 0;
  for (const Child& c : children_) n += c.pidfd.valid() ? 1 : 0;
  return n;
}

absl::StatusOr<std::optional<ChildExit>> ProcessGroup::try_reap(Child& child) {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  // Look first without reaping: while the zombie exists its pid (and so its process group id)
  // cannot be reused, which makes the group kill below safe.
  if (::waitid(P_PID, child.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) return std::nullopt;
    return errno_error(absl::StrCat("waitid(", child.pid, ")"), errno);
  }
  if (info.si_pid == 0) return std::nullopt;
  ::kill(-child.pid, SIGKILL);  // leftovers of its process group; ESRCH when there are none
  std::memset(&info, 0, sizeof(info));
  int rc;
  do {
    rc = ::waitid(P_PID, child.pid, &info, WEXITED);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return errno_error(absl::StrCat("waitid(", child.pid, ")"), errno);
  child.pidfd.reset();
  ChildExit exit;
  exit.rank = child.rank;
  exit.pid = child.pid;
  exit.name = child.label;
  if (info.si_code == CLD_EXITED) {
    exit.exit_code = info.si_status;
  } else {
    exit.signal = info.si_status;
    exit.core_dumped = info.si_code == CLD_DUMPED;
  }
  return exit;
}

absl::StatusOr<std::optional<ChildExit>> ProcessGroup::wait_any(ProcessClock::time_point deadline, int wake_fd) {
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Child*> polled;
    for (Child& c : children_) {
      if (!c.pidfd.valid()) continue;
      fds.push_back(pollfd{c.pidfd.get(), POLLIN, 0});
      polled.push_back(&c);
    }
    if (wake_fd >= 0) fds.push_back(pollfd{wake_fd, POLLIN, 0});
    if (fds.empty()) return absl::FailedPreconditionError("wait_any: every child has already been reported");
    absl::StatusOr<int> ready = poll_until(fds, deadline);
    if (!ready.ok()) return ready.status();
    if (*ready == 0) return std::nullopt;
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i].revents == 0) continue;
      absl::StatusOr<std::optional<ChildExit>> exit = try_reap(*polled[i]);
      if (!exit.ok() || exit->has_value()) return exit;
    }
    if (wake_fd >= 0 && fds.back().revents != 0) return std::nullopt;
  }
}

void ProcessGroup::signal_pending(int sig) {
  for (const Child& c : children_) {
    if (!c.pidfd.valid()) continue;
    // The child itself (in case it left its group) and its group (helpers it started).
    ::kill(c.pid, sig);
    ::kill(-c.pid, sig);
  }
}

absl::Status ProcessGroup::reap_until(ProcessClock::time_point deadline, std::vector<ChildExit>& exits) {
  while (pending_count() > 0) {
    absl::StatusOr<std::optional<ChildExit>> exit = wait_any(deadline);
    if (!exit.ok()) return exit.status();
    if (!exit->has_value()) break;
    exits.push_back(std::move(**exit));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChildExit>> ProcessGroup::terminate_all(std::chrono::milliseconds grace) {
  std::vector<ChildExit> exits;
  if (pending_count() == 0) return exits;
  signal_pending(SIGTERM);
  if (absl::Status s = reap_until(ProcessClock::now() + grace, exits); !s.ok()) return s;
  if (pending_count() == 0) return exits;
  signal_pending(SIGKILL);
  if (absl::Status s = reap_until(ProcessClock::now() + kKillWait, exits); !s.ok()) return s;
  if (pending_count() == 0) return exits;
  std::string stuck;
  for (const Child& c : children_) {
    if (c.pidfd.valid()) absl::StrAppend(&stuck, stuck.empty() ? "" : ", ", c.label, " (pid ", c.pid, ")");
  }
  return absl::DeadlineExceededError(absl::StrCat("still running 5 s after SIGKILL: ", stuck));
}

}  // namespace exl3
