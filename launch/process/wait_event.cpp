// The launcher's combined wait on signals, child exits and a deadline; see wait_event.h.
#include "launch/process/wait_event.h"

namespace exl3 {

absl::StatusOr<SupervisorEvent> wait_event(ProcessGroup* group, SignalWatcher& signals,
                                           ProcessClock::time_point deadline) {
  while (true) {
    SupervisorEvent event;
    if (std::optional<int> sig = signals.take()) {
      event.kind = SupervisorEvent::Kind::kSignal;
      event.signal = *sig;
      return event;
    }
    if (group == nullptr || group->pending_count() == 0) {
      absl::StatusOr<std::optional<int>> sig = signals.wait(deadline);
      if (!sig.ok()) return sig.status();
      if (sig->has_value()) {
        event.kind = SupervisorEvent::Kind::kSignal;
        event.signal = **sig;
      }
      return event;
    }
    absl::StatusOr<std::optional<ChildExit>> exit = group->wait_any(deadline, signals.fd());
    if (!exit.ok()) return exit.status();
    if (exit->has_value()) {
      event.kind = SupervisorEvent::Kind::kChildExited;
      event.exit = std::move(**exit);
      return event;
    }
    if (ProcessClock::now() >= deadline) return event;
    // Otherwise the signal pipe became readable: take it at the top of the loop.
  }
}

}  // namespace exl3
