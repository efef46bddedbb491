// POSIX helpers of launch/process: deadline-bounded poll, pipes, full writes, errno statuses.
#include "launch/process/fd_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::Status errno_error(std::string_view what, int err) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(std::string(what), ": ", std::strerror(err)));
}

int poll_timeout_ms(ProcessClock::time_point deadline) {
  const auto now = ProcessClock::now();
  if (deadline <= now) return 0;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

absl::StatusOr<int> poll_until(std::span<pollfd> fds, ProcessClock::time_point deadline) {
  while (true) {
    for (pollfd& p : fds) p.revents = 0;
    const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(deadline));
    if (n >= 0) return n;
    if (errno != EINTR) return errno_error("poll", errno);
  }
}

absl::StatusOr<UniqueFd> above_stdio(UniqueFd fd) {
  if (fd.get() > STDERR_FILENO) return fd;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) return errno_error("fcntl(F_DUPFD_CLOEXEC)", errno);
  return UniqueFd(moved);
}

absl::StatusOr<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return errno_error("pipe2", errno);
  UniqueFd read(fds[0]);
  UniqueFd write(fds[1]);
  absl::StatusOr<UniqueFd> r = above_stdio(std::move(read));
  if (!r.ok()) return r.status();
  absl::StatusOr<UniqueFd> w = above_stdio(std::move(write));
  if (!w.ok()) return w.status();
  return Pipe{std::move(*r), std::move(*w)};
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace exl3
