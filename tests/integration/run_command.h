// A short-lived command run by an integration test (exl3-launch that must refuse to start,
// exl3-client against a server): stdout and stderr together in a log file of the test work
// directory, the exit awaited with a deadline, a command still running then SIGKILLed and reaped.
// Started with start_child (PDEATHSIG), so a crashed test leaves nothing behind. Header-only (see
// launched_server.h).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch/process/child_process.h"
#include "launch/process/unique_fd.h"

namespace exl3::testing {

struct CommandResult {
  std::optional<int> wait_status;  // nullopt: it did not exit in time (it was killed)
  std::string output;              // stdout and stderr
  std::string error;               // why it could not be started, if so

  bool exited_with(int code) const {
    return wait_status && WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == code;
  }
  bool failed() const { return wait_status && !(WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == 0); }
  std::string describe() const {
    std::string s = !error.empty()      ? "not started: " + error
                    : !wait_status      ? std::string("still running at the deadline (killed)")
                    : WIFEXITED(*wait_status) ? "exited with code " + std::to_string(WEXITSTATUS(*wait_status))
                                              : "killed by signal " + std::to_string(WTERMSIG(*wait_status));
    return s + "\n--- output ---\n" + output;
  }
};

inline CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                 const std::string& log_name) {
  static std::atomic<int> runs{0};
  const std::string log_path = std::string(EXL3_TEST_WORK_DIR) + "/" + log_name + "-" + std::to_string(::getpid()) +
                               "-" + std::to_string(runs++) + ".log";
  CommandResult result;
  {
    UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (log.get() < 0) {
      result.error = "cannot open " + log_path;
      return result;
    }
    ChildLaunch launch;
    launch.argv = argv;
    launch.stdout_fd = log.get();
    launch.stderr_fd = log.get();
    absl::StatusOr<StartedChild> child = start_child(launch);
    if (!child.ok()) {
      result.error = std::string(child.status().message());
      return result;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int status = 0;
      const pid_t r = ::waitpid(child->pid, &status, WNOHANG);
      if (r == child->pid) {
        result.wait_status = status;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(child->pid, SIGKILL);
        ::waitpid(child->pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::ifstream in(log_path);
  result.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return result;
}

// Writes `text` to a new file of the test work directory and returns its path.
inline std::string write_work_file(const std::string& name, const std::string& text) {
  const std::string path = std::string(EXL3_TEST_WORK_DIR) + "/" + name + "-" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

}  // namespace exl3::testing
