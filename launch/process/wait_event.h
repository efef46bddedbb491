// wait_event: the launcher's supervision wait, "a watched signal arrived OR a child exited OR
// the deadline passed", whichever comes first, with nothing lost in between: signals wait in
// the watcher's pipe and exited children stay reportable until reaped.
#pragma once

#include "absl/status/statusor.h"
#include "launch/process/fd_util.h"
#include "launch/process/process_group.h"
#include "launch/process/signal_watcher.h"

namespace exl3 {

struct SupervisorEvent {
  enum class Kind { kSignal, kChildExited, kDeadline };
  Kind kind = Kind::kDeadline;
  int signal = 0;  // kSignal
  ChildExit exit;  // kChildExited (the child is reaped)
};

// Pending signals are reported before child exits. With no child pending it waits for signals
// only. A null `group` also means signals only.
absl::StatusOr<SupervisorEvent> wait_event(ProcessGroup* group, SignalWatcher& signals,
                                           ProcessClock::time_point deadline);

}  // namespace exl3
