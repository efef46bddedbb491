// fork + execve of one child with PDEATHSIG, its own process group and an exec-error pipe; see
// child_process.h for the rules the child follows.
#include "launch/process/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "launch/process/fd_util.h"

extern char** environ;

namespace exl3 {
namespace {

// The child reports an exec failure as its errno through the error pipe, then exits with this.
constexpr int kExecFailedExit = 127;
// The launcher was gone before PR_SET_PDEATHSIG took effect; nobody will read this code.
constexpr int kParentGoneExit = 126;
// A child that neither execs nor fails within this time is killed (it only runs a handful of
// system calls before execve, so this is far beyond any real start).
constexpr auto kExecTimeout = std::chrono::seconds(10);

// Everything the child needs, prepared before fork so the child allocates nothing.
struct ChildPlan {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  pid_t parent = -1;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int error_fd = -1;
};

// Makes `fd` the descriptor `target` without close-on-exec. Async-signal-safe.
bool install_fd(int fd, int target) {
  if (fd == target) return ::fcntl(fd, F_SETFD, 0) == 0;
  return ::dup2(fd, target) == target;
}

[[noreturn]] void fail_in_child(int error_fd, int err) {
  const ssize_t n = ::write(error_fd, &err, sizeof(err));
  (void)n;
  ::_exit(kExecFailedExit);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void run_child(const ChildPlan& plan) {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  // SIGKILL, SIGSTOP and the C library's internal signals refuse this; that is fine.
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);

  ::setpgid(0, 0);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail_in_child(plan.error_fd, errno);
  if (::getppid() != plan.parent) ::_exit(kParentGoneExit);

  if (!install_fd(plan.stdin_fd, STDIN_FILENO)) fail_in_child(plan.error_fd, errno);
  if (plan.stdout_fd >= 0 && !install_fd(plan.stdout_fd, STDOUT_FILENO)) fail_in_child(plan.error_fd, errno);
  if (plan.stderr_fd >= 0 && !install_fd(plan.stderr_fd, STDERR_FILENO)) fail_in_child(plan.error_fd, errno);
  // Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC; the child then keeps descriptors the parent
  // opened without O_CLOEXEC, which is harmless for correctness.
  ::close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC);

  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan.program, plan.argv, plan.envp);
  fail_in_child(plan.error_fd, errno);
}

// Kills and reaps a child that failed to start. SIGKILL cannot be caught, so this ends within
// milliseconds; after 5 s (a process stuck in the kernel) the zombie is left to init.
void discard_child(pid_t pid) {
  ::kill(pid, SIGKILL);
  const auto deadline = ProcessClock::now() + std::chrono::seconds(5);
  while (ProcessClock::now() < deadline) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;
    ::usleep(1000);
  }
}

absl::Status check_launch(const ChildLaunch& launch) {
  if (launch.argv.empty()) return absl::InvalidArgumentError("empty argv");
  const std::string& program = launch.argv[0];
  if (program.find('/') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("program '", program, "' must be a path containing '/' (there is no PATH search)"));
  }
  if (::access(program.c_str(), X_OK) != 0) return errno_error(absl::StrCat("program ", program), errno);
  for (const auto& [name, value] : launch.env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad environment variable name '", name, "'"));
    }
  }
  struct sigaction chld;
  if (::sigaction(SIGCHLD, nullptr, &chld) != 0) return errno_error("sigaction(SIGCHLD)", errno);
  if (chld.sa_handler == SIG_IGN || (chld.sa_flags & SA_NOCLDWAIT) != 0) {
    return absl::FailedPreconditionError("SIGCHLD is ignored, so children would be reaped behind our back");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> merged_environment(const char* const* base,
                                            const std::vector<std::pair<std::string, std::string>>& overrides) {
  auto overridden = [&](std::string_view name, size_t from) {
    for (size_t i = from; i < overrides.size(); ++i) {
      if (overrides[i].first == name) return true;
    }
    return false;
  };
  std::vector<std::string> out;
  for (const char* const* p = base; p != nullptr && *p != nullptr; ++p) {
    const std::string_view entry(*p);
    if (!overridden(entry.substr(0, entry.find('=')), 0)) out.emplace_back(entry);
  }
  // The last setting of a name wins, as with repeated `export`.
  for (size_t i = 0; i < overrides.size(); ++i) {
    if (!overridden(overrides[i].first, i + 1))
      out.push_back(absl::StrCat(overrides[i].first, "=", overrides[i].second));
  }
  return out;
}

absl::StatusOr<StartedChild> start_child(const ChildLaunch& launch) {
  if (absl::Status s = check_launch(launch); !s.ok()) return s;

  std::vector<std::string> argv_strings = launch.argv;
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = merged_environment(environ, launch.env);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) return errno_error("open /dev/null", errno);
  absl::StatusOr<UniqueFd> stdin_fd = above_stdio(UniqueFd(null_fd));
  if (!stdin_fd.ok()) return stdin_fd.status();
  absl::StatusOr<Pipe> error_pipe = make_pipe();
  if (!error_pipe.ok()) return error_pipe.status();

  ChildPlan plan;
  plan.program = argv[0];
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.parent = ::getpid();
  plan.stdin_fd = stdin_fd->get();
  plan.stdout_fd = launch.stdout_fd;
  plan.stderr_fd = launch.stderr_fd;
  plan.error_fd = error_pipe->write.get();

  // All signals stay blocked across fork so that no handler of ours runs in the child before it
  // has reset the dispositions.
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) run_child(plan);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) return errno_error("fork", fork_errno);

  // Also set here so the group exists before we could signal it; EACCES once the child has
  // exec'd is expected (it has then set the group itself).
  ::setpgid(pid, pid);
  error_pipe->write.reset();

  // The child is ours and not yet reaped, so its pid cannot have been reused.
  // The raw system call: glibc 2.36's <sys/pidfd.h> lacks extern "C" and cannot be used from C++.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int err = errno;
    discard_child(pid);
    return errno_error("pidfd_open (Linux 5.3 or later is required)", err);
  }
  StartedChild child{pid, UniqueFd(pidfd)};

  pollfd wait_exec{error_pipe->read.get(), POLLIN, 0};
  absl::StatusOr<int> ready = poll_until(std::span<pollfd>(&wait_exec, 1), ProcessClock::now() + kExecTimeout);
  if (!ready.ok() || *ready == 0) {
    discard_child(pid);
    if (!ready.ok()) return ready.status();
    return absl::DeadlineExceededError(absl::StrCat("child ", launch.argv[0], " did not exec within 10 s"));
  }
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(error_pipe->read.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n == 0) return child;  // end of file: the pipe closed on a successful exec
  discard_child(pid);
  if (n != static_cast<ssize_t>(sizeof(child_errno))) {
    return absl::InternalError(absl::StrCat("child ", launch.argv[0], " failed before exec; no error code"));
  }
  return errno_error(absl::StrCat("exec ", launch.argv[0]), child_errno);
}

}  // namespace exl3
