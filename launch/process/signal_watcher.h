// SignalWatcher: turns SIGINT/SIGTERM (or other chosen signals) into bytes on a self-pipe, so
// the launcher's main loop can poll() for "a signal arrived OR a child exited OR the deadline"
// with no race: a signal that arrives before the wait stays in the pipe until taken. Each
// arrival is kept (up to the pipe's 64 KiB), so a second Ctrl-C can be told from the first.
//
// Handlers rather than signalfd: signalfd needs the signals blocked in every thread, including
// threads started before it (gRPC's), or the default action kills the process; a handler works
// whichever thread receives the signal. Handlers use SA_RESTART. At most one watcher exists at a
// time; children started by ProcessGroup reset the handlers before exec.
#pragma once

#include <signal.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/process/fd_util.h"
#include "launch/process/unique_fd.h"

namespace exl3 {

class SignalWatcher {
 public:
  // Installs the handlers. FailedPrecondition if another watcher exists, InvalidArgument for a
  // signal that cannot be caught (SIGKILL, SIGSTOP) or is out of range.
  static absl::StatusOr<std::unique_ptr<SignalWatcher>> create(std::vector<int> signals = {SIGINT, SIGTERM});
  // Puts the previous handlers back.
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Readable while a signal is waiting to be taken (for poll loops such as wait_event).
  int fd() const { return pipe_.read.get(); }
  // The oldest signal not yet taken, without waiting.
  std::optional<int> take();
  // The oldest signal not yet taken, waiting for one until the deadline (nullopt then).
  absl::StatusOr<std::optional<int>> wait(ProcessClock::time_point deadline);

 private:
  SignalWatcher() = default;

  Pipe pipe_;
  std::vector<std::pair<int, struct sigaction>> previous_;
};

}  // namespace exl3
