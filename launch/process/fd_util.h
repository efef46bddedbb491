// Small POSIX helpers shared by the process code: deadline-bounded poll(), close-on-exec pipes
// whose ends never land on descriptors 0-2, full writes, and errno as absl::Status.
#pragma once

#include <poll.h>

#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launch/process/unique_fd.h"

namespace exl3 {

// Every wait in launch/process takes a deadline on this clock.
using ProcessClock = std::chrono::steady_clock;

// absl::Status for a failed system call: the errno's code, "what: strerror(err)".
absl::Status errno_error(std::string_view what, int err);

// Milliseconds from now to `deadline` for poll(), rounded up, clamped to [0, INT_MAX].
int poll_timeout_ms(ProcessClock::time_point deadline);

// poll() until an event or the deadline; retries EINTR with the remaining time. Returns the
// number of entries with revents set (0 when the deadline passed).
absl::StatusOr<int> poll_until(std::span<pollfd> fds, ProcessClock::time_point deadline);

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// A pipe with both ends close-on-exec and numbered 3 or above, so that dup2() onto 0, 1 and 2
// in a child can never overwrite one end with the other.
absl::StatusOr<Pipe> make_pipe();

// Moves `fd` to a close-on-exec descriptor numbered 3 or above (no-op when it already is >= 3).
absl::StatusOr<UniqueFd> above_stdio(UniqueFd fd);

// Writes all of `data`, retrying short writes and EINTR. Returns false on any other error.
bool write_all(int fd, std::string_view data);

}  // namespace exl3
