// The self-pipe signal handler behind SignalWatcher; see signal_watcher.h.
#include "launch/process/signal_watcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace exl3 {
namespace {

// The handler's only state: where to write. A lock-free atomic is safe to read in a handler.
std::atomic<int> g_write_fd{-1};
std::atomic<bool> g_watcher_exists{false};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_watched_signal(int sig) {
  const int saved_errno = errno;
  const int fd = g_write_fd.load(std::memory_order_acquire);
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    // Non-blocking: with the pipe full the arrival is dropped, never the process blocked.
    const ssize_t n = ::write(fd, &byte, 1);
    (void)n;
  }
  errno = saved_errno;
}

absl::Status set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno_error("fcntl(O_NONBLOCK)", errno);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SignalWatcher>> SignalWatcher::create(std::vector<int> signals) {
  for (int sig : signals) {
    if (sig <= 0 || sig >= NSIG || sig > 255 || sig == SIGKILL || sig == SIGSTOP) {
      return absl::InvalidArgumentError(absl::StrCat("signal ", sig, " cannot be watched"));
    }
  }
  if (g_watcher_exists.exchange(true)) return absl::FailedPreconditionError("a SignalWatcher already exists");
  std::unique_ptr<SignalWatcher> watcher(new SignalWatcher());
  absl::StatusOr<Pipe> pipe = make_pipe();
  absl::Status status = pipe.status();
  if (status.ok()) status = set_nonblocking(pipe->read.get());
  if (status.ok()) status = set_nonblocking(pipe->write.get());
  if (!status.ok()) {
    g_watcher_exists.store(false);
    return status;
  }
  watcher->pipe_ = std::move(*pipe);
  g_write_fd.store(watcher->pipe_.write.get(), std::memory_order_release);

  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_watched_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int sig : signals) {
    struct sigaction previous;
    // On failure the destructor restores those installed so far.
    if (::sigaction(sig, &action, &previous) != 0) return errno_error(absl::StrCat("sigaction(", sig, ")"), errno);
    watcher->previous_.emplace_back(sig, previous);
  }
  return watcher;
}

SignalWatcher::~SignalWatcher() {
  for (const auto& [sig, previous] : previous_) ::sigaction(sig, &previous, nullptr);
  g_write_fd.store(-1, std::memory_order_release);
  g_watcher_exists.store(false);
}

std::optional<int> SignalWatcher::take() {
  unsigned char byte = 0;
  while (true) {
    const ssize_t n = ::read(pipe_.read.get(), &byte, 1);
    if (n == 1) return static_cast<int>(byte);
    if (n < 0 && errno == EINTR) continue;
    return std::nullopt;  // EAGAIN: nothing pending
  }
}

absl::StatusOr<std::optional<int>> SignalWatcher::wait(ProcessClock::time_point deadline) {
  while (true) {
    if (std::optional<int> sig = take()) return sig;
    pollfd p{pipe_.read.get(), POLLIN, 0};
    absl::StatusOr<int> ready = poll_until(std::span<pollfd>(&p, 1), deadline);
    if (!ready.ok()) return ready.status();
    if (*ready == 0) return std::nullopt;
  }
}

}  // namespace exl3
