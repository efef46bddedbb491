// An exl3-launch process run by an integration test: started with --port 0 on the tiny fixture
// model, its stdout read through a pipe for the "serving on HOST:PORT" lines, its stderr written to
// a log file in the test work directory (printed by the tests when they fail), its worker pids
// found in /proc, and its exit awaited with a deadline. Header-only because tests/CMakeLists.txt
// turns every *_test.cpp into an executable and has no place for a shared .cpp.
//
// No-orphan rules: the launcher is started with start_child (PDEATHSIG = SIGKILL, its own process
// group), so a crashed test takes it down, and its workers die with it through their own
// PDEATHSIG. The destructor SIGKILLs and reaps a launcher that is still running. Use from the
// thread that created it (PDEATHSIG follows the creating thread); nothing else in the test may
// reap children.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "grpcpp/channel.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "launch/process/child_process.h"
#include "launch/process/fd_util.h"
#include "launch/process/unique_fd.h"
#include "proto/inference.grpc.pb.h"

namespace exl3::testing {

using TestClock = std::chrono::steady_clock;

inline std::string fixture_model_dir() { return std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw"; }

struct LaunchConfig {
  std::string model_dir = fixture_model_dir();
  int workers = 2;
  std::string mode = "tp";
  int max_seq_len = 512;
  int max_batch = 16;
  bool restart = false;
  // Name of the stderr log file in the test work directory (unique per launch).
  std::string log_name = "launcher";
  // Further exl3-launch flags, appended as given.
  std::vector<std::string> extra_args;
};

// True when no process with this pid exists (it exited and was reaped).
inline bool process_gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// The pids of `pids` that still exist once every one is gone or the deadline has passed.
inline std::vector<pid_t> still_present(const std::vector<pid_t>& pids, TestClock::time_point deadline) {
  std::vector<pid_t> left;
  while (true) {
    left.clear();
    for (pid_t p : pids) {
      if (!process_gone(p)) left.push_back(p);
    }
    if (left.empty() || TestClock::now() >= deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// argv[0..] of a running process joined with spaces; empty when it is gone or unreadable.
inline std::string process_cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(raw.begin(), raw.end(), '\0', ' ');
  return raw;
}

// The parent pid from /proc/PID/stat, or -1. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
inline pid_t parent_pid(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  long ppid = -1;
  rest >> state >> ppid;
  return static_cast<pid_t>(ppid);
}

// Pids of the children of `parent` whose command line contains `needle` (a zombie's command line
// is empty, so exited children never match).
inline std::vector<pid_t> children_matching(pid_t parent, const std::string& needle) {
  std::vector<pid_t> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = ::readdir(dir)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    if (parent_pid(pid) != parent) continue;
    if (process_cmdline(pid).find(needle) != std::string::npos) out.push_back(pid);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

class LaunchedServer {
 public:
  // Starts exl3-launch and waits until it prints its first "serving on" line.
  static absl::StatusOr<std::unique_ptr<LaunchedServer>> start(const LaunchConfig& config,
                                                               std::chrono::seconds ready_timeout) {
    std::unique_ptr<LaunchedServer> server(new LaunchedServer());
    static std::atomic<int> launches{0};
    server->log_path_ = std::string(EXL3_TEST_WORK_DIR) + "/" + config.log_name + "-" + std::to_string(::getpid()) +
                        "-" + std::to_string(launches++) + ".log";
    UniqueFd log(::open(server->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (log.get() < 0) return errno_error("open " + server->log_path_, errno);
    absl::StatusOr<Pipe> out = make_pipe();
    if (!out.ok()) return out.status();

    ChildLaunch launch;
    launch.argv = {std::string(EXL3_BIN_DIR) + "/exl3-launch"};
    const std::pair<const char*, std::string> flags[] = {
        {"--model", config.model_dir},
        {"--cpu-workers", std::to_string(config.workers)},
        {"--mode", config.mode},
        {"--port", "0"},
        {"--max-seq-len", std::to_string(config.max_seq_len)},
        {"--max-batch", std::to_string(config.max_batch)},
    };
    for (const auto& [flag, value] : flags) {
      launch.argv.push_back(flag);
      launch.argv.push_back(value);
    }
    if (config.restart) launch.argv.push_back("--restart");
    launch.argv.insert(launch.argv.end(), config.extra_args.begin(), config.extra_args.end());
    launch.stdout_fd = out->write.get();
    launch.stderr_fd = log.get();
    absl::StatusOr<StartedChild> child = start_child(launch);
    if (!child.ok()) return child.status();
    server->pid_ = child->pid;
    server->stdout_ = std::move(out->read);
    // The child holds its own copy; closing ours lets reads see end-of-file when it exits.
    out->write.reset();

    absl::StatusOr<std::string> address = server->next_serving_line(TestClock::now() + ready_timeout);
    if (!address.ok()) {
      return absl::Status(address.status().code(),
                          std::string(address.status().message()) + "\n--- launcher log ---\n" + server->log());
    }
    server->address_ = *address;
    return server;
  }

  ~LaunchedServer() {
    // pid_ stays -1 when start() failed before the fork (kill(-1) would signal everything).
    if (pid_ <= 0 || reaped_) return;
    // The workers follow through their PDEATHSIG; their pids are not signalled here, since a
    // reused pid could belong to someone else's process.
    ::kill(pid_, SIGKILL);
    wait_exit(TestClock::now() + std::chrono::seconds(10));
  }

  LaunchedServer(const LaunchedServer&) = delete;
  LaunchedServer& operator=(const LaunchedServer&) = delete;

  pid_t pid() const { return pid_; }
  // "127.0.0.1:PORT" from the latest "serving on" line.
  const std::string& address() const { return address_; }

  // A new channel to the current address (each test thread gets its own).
  std::shared_ptr<grpc::Channel> channel() const {
    return grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  }
  std::unique_ptr<v1::Inference::Stub> stub() const { return v1::Inference::NewStub(channel()); }

  // Waits for the next "serving on" line (after a restart) and makes it the current address.
  absl::Status wait_serving_again(TestClock::time_point deadline) {
    absl::StatusOr<std::string> address = next_serving_line(deadline);
    if (!address.ok()) return address.status();
    address_ = *address;
    return absl::OkStatus();
  }

  // The launcher's exl3-worker children, waiting up to the deadline until there are `count`.
  // Every pid seen is remembered (known_workers) so a test can check that all are gone.
  std::vector<pid_t> worker_pids(size_t count, TestClock::time_point deadline) {
    std::vector<pid_t> pids;
    while (true) {
      pids = children_matching(pid_, "exl3-worker");
      if (pids.size() >= count || TestClock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (pid_t p : pids) {
      if (std::find(known_workers_.begin(), known_workers_.end(), p) == known_workers_.end()) {
        known_workers_.push_back(p);
      }
    }
    return pids;
  }
  const std::vector<pid_t>& known_workers() const { return known_workers_; }

  bool signal(int sig) const { return pid_ > 0 && !reaped_ && ::kill(pid_, sig) == 0; }

  // SIGTERM (drain and stop) and up to `timeout` for the launcher to exit; its wait status, or
  // nullopt when it is still running (the destructor then SIGKILLs it).
  std::optional<int> stop(std::chrono::milliseconds timeout) {
    signal(SIGTERM);
    return wait_exit(TestClock::now() + timeout);
  }

  // Reaps the launcher if it exits before the deadline; returns its wait status (also on later
  // calls once reaped), or nullopt while it is still running.
  std::optional<int> wait_exit(TestClock::time_point deadline) {
    if (pid_ <= 0) return std::nullopt;  // never waitpid(-1): that would reap any child
    while (!reaped_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        reaped_ = true;
        exit_status_ = status;
        break;
      }
      if (r < 0 && errno != EINTR) return std::nullopt;
      if (TestClock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exit_status_;
  }
  bool reaped() const { return reaped_; }

  // Everything the launcher and its workers wrote to stderr so far.
  std::string log() const {
    std::ifstream in(log_path_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  // The last `bytes` of the log, for failure messages.
  std::string log_tail(size_t bytes = 4000) const {
    const std::string all = log();
    return all.size() <= bytes ? all : all.substr(all.size() - bytes);
  }

 private:
  LaunchedServer() = default;

  // Reads stdout until a complete "serving on HOST:PORT" line; returns "127.0.0.1:PORT".
  absl::StatusOr<std::string> next_serving_line(TestClock::time_point deadline) {
    static constexpr char kPrefix[] = "serving on ";
    while (true) {
      size_t eol;
      while ((eol = stdout_buffer_.find('\n')) != std::string::npos) {
        const std::string line = stdout_buffer_.substr(0, eol);
        stdout_buffer_.erase(0, eol + 1);
        if (line.rfind(kPrefix, 0) != 0) continue;
        const size_t colon = line.rfind(':');
        int port = 0;
        if (colon == std::string::npos || !absl::SimpleAtoi(line.substr(colon + 1), &port) || port <= 0) {
          return absl::InternalError("unparsable line on the launcher's stdout: " + line);
        }
        return "127.0.0.1:" + std::to_string(port);
      }
      pollfd p{stdout_.get(), POLLIN, 0};
      absl::StatusOr<int> ready = poll_until(std::span<pollfd>(&p, 1), deadline);
      if (!ready.ok()) return ready.status();
      if (*ready == 0) return absl::DeadlineExceededError("no \"serving on\" line from exl3-launch in time");
      char buf[512];
      const ssize_t n = ::read(stdout_.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::UnavailableError("exl3-launch closed its stdout (it exited) before serving");
      stdout_buffer_.append(buf, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_status_ = 0;
  UniqueFd stdout_;
  std::string stdout_buffer_;
  std::string address_;
  std::string log_path_;
  std::vector<pid_t> known_workers_;
};

// "exited with code N" / "killed by signal N" for assertion messages.
inline std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

}  // namespace exl3::testing
