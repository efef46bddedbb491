// ProcessGroup: the launcher's set of worker processes, rank r = specs[r]. It starts them
// (see child_process.h for what every child gets: its own process group, PDEATHSIG = SIGKILL,
// /dev/null as stdin), reports which one exited and how, and stops them all without leaving
// orphans or zombies:
//   - a launcher killed by SIGKILL takes its children down through PDEATHSIG;
//   - when a child is reaped, anything left in its process group (helpers it started) is
//     SIGKILLed first, while the exited child still holds the group id;
//   - terminate_all sends SIGTERM to every child and its group, waits up to a grace period,
//     then SIGKILLs what is left and reaps everything;
//   - the destructor does terminate_all(options.teardown_grace) if children remain.
// Grandchildren that leave their process group (setsid) are outside this guarantee.
//
// Output: with ChildOutput::kPrefixLines (the default) each child's stdout and stderr go through
// pipes to the launcher's stdout_fd / stderr_fd with "[worker R] " (or "[label] ") before every
// line; with kInherit children write straight to the launcher's descriptors.
//
// Use from one thread: the one that created the group, which must outlive the children (Linux
// delivers PDEATHSIG when the creating thread exits). Nothing else in the process may reap
// children (waitpid(-1), SIGCHLD set to SIG_IGN).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/process/fd_util.h"
#include "launch/process/unique_fd.h"

namespace exl3 {

class OutputPump;

struct ProcessSpec {
  // argv[0] is the program: a path containing '/' (no PATH search).
  std::vector<std::string> argv;
  // Variables set on top of the launcher's environment, e.g. {"CUDA_VISIBLE_DEVICES", "3"}.
  std::vector<std::pair<std::string, std::string>> env;
  // Name in the output prefix "[label] "; empty = "worker R".
  std::string label;
};

enum class ChildOutput {
  kInherit,      // children share the launcher's stdout and stderr
  kPrefixLines,  // lines go through pipes and get a "[worker R] " prefix
};

struct ProcessGroupOptions {
  ChildOutput output = ChildOutput::kPrefixLines;
  // Destinations of the prefixed lines (kPrefixLines only); not owned, must outlive the group.
  int stdout_fd = STDOUT_FILENO;
  int stderr_fd = STDERR_FILENO;
  // Grace between SIGTERM and SIGKILL when the destructor has to stop children.
  std::chrono::milliseconds teardown_grace{2000};
};

// How a child ended.
struct ChildExit {
  int rank = -1;
  pid_t pid = -1;
  // The spec's label, or "worker R".
  std::string name;
  // exit() status when signal == 0.
  int exit_code = 0;
  // The signal that killed it, or 0 when it exited.
  int signal = 0;
  bool core_dumped = false;

  bool killed_by_signal() const { return signal != 0; }
  bool success() const { return signal == 0 && exit_code == 0; }
  // "worker 1 (pid 4242) exited with code 3" / "worker 1 (pid 4242) was killed by SIGKILL".
  std::string describe() const;
};

class ProcessGroup {
 public:
  // Starts one child per spec, in rank order. If one cannot start, those already started are
  // stopped (SIGTERM, teardown_grace, SIGKILL) and the error names the rank.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> spawn(std::vector<ProcessSpec> specs,
                                                             ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int size() const { return static_cast<int>(children_.size()); }
  pid_t pid(int rank) const;
  std::vector<pid_t> pids() const;

  // Whether the child is still running (it has not exited; a child that exited but was not yet
  // reported by wait_any is not alive).
  bool alive(int rank) const;
  int alive_count() const;
  // Children not yet reported by wait_any / terminate_all (running, or exited and not reaped).
  int pending_count() const;

  // Waits until a child exits or the deadline passes; reaps the child and returns how it ended
  // (several exits are reported one per call, lowest rank first), or nullopt at the deadline.
  // If wake_fd >= 0, also returns nullopt as soon as wake_fd is readable (see wait_event).
  // FailedPrecondition when no child is pending and there is no wake_fd.
  absl::StatusOr<std::optional<ChildExit>> wait_any(ProcessClock::time_point deadline, int wake_fd = -1);

  // SIGTERM to every pending child and its process group, up to `grace` for them to exit, then
  // SIGKILL to what remains; reaps all of them and returns their exits in the order reaped.
  // DeadlineExceeded if some child survives 5 s after SIGKILL (stuck in the kernel).
  absl::StatusOr<std::vector<ChildExit>> terminate_all(std::chrono::milliseconds grace);

 private:
  struct Child {
    int rank = -1;
    pid_t pid = -1;
    UniqueFd pidfd;  // invalid once reaped
    std::string label;
  };

  explicit ProcessGroup(ProcessGroupOptions options);
  // Reaps `child` if it has exited; nullopt if it is still running.
  absl::StatusOr<std::optional<ChildExit>> try_reap(Child& child);
  void signal_pending(int sig);
  // Reaps into `exits` until no child is pending or the deadline passes.
  absl::Status reap_until(ProcessClock::time_point deadline, std::vector<ChildExit>& exits);

  ProcessGroupOptions options_;
  std::vector<Child> children_;
  std::unique_ptr<OutputPump> pump_;
};

}  // namespace exl3
