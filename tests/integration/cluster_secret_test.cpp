// exl3-coordinator started with --cluster-secret-file, as an operator does on several hosts:
// an exl3-worker without the secret and one with a wrong secret are refused at registration and
// exit non-zero naming the coordinator's address and the flag; a worker given an empty secret
// file exits 2 naming the flag and the path; then the worker with the right secret takes rank 0
// (the refused ones did not) and the coordinator serves. No log shows the secret.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/free_port.h"
#include "integration/launched_server.h"
#include "integration/run_command.h"
#include "worker/comm/cluster_secret.h"

namespace exl3::testing {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A child whose stdout and stderr go to a log file; SIGKILLed and reaped when the test ends.
class LoggedChild {
 public:
  LoggedChild(std::vector<std::string> argv, const std::string& name)
      : log_path_(std::string(EXL3_TEST_WORK_DIR) + "/" + name + "-" + std::to_string(::getpid()) + ".log") {
    UniqueFd log(::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (log.get() < 0) {
      error_ = "cannot open " + log_path_;
      return;
    }
    ChildLaunch launch;
    launch.argv = std::move(argv);
    launch.stdout_fd = log.get();
    launch.stderr_fd = log.get();
    absl::StatusOr<StartedChild> child = start_child(launch);
    if (!child.ok()) {
      error_ = std::string(child.status().message());
      return;
    }
    pid_ = child->pid;
  }
  ~LoggedChild() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  bool started() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  std::string log() const { return read_all(log_path_); }
  // Whether it has exited (and reaps it then).
  bool exited() {
    if (reaped_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) reaped_ = true;
    return reaped_;
  }
  // Polls the log for `needle` until the deadline or the child's exit; the log's text from the
  // needle on, or nullopt.
  std::optional<std::string> wait_for(const std::string& needle, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const std::string text = log();
      const size_t at = text.find(needle);
      if (at != std::string::npos) return text.substr(at);
      if (exited() || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  std::string log_path_;
  std::string error_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

TEST(ClusterSecret, CoordinatorAdmitsOnlyWorkersWithTheRunSecret) {
  absl::StatusOr<std::string> secret = make_cluster_secret();
  absl::StatusOr<std::string> wrong = make_cluster_secret();
  ASSERT_TRUE(secret.ok() && wrong.ok());
  const std::string secret_file = write_work_file("cluster-secret", *secret + "\n");
  const std::string wrong_file = write_work_file("cluster-secret-wrong", *wrong + "\n");
  const std::string empty_file = write_work_file("cluster-secret-empty", "\n");
  const int control_port = free_port();
  ASSERT_GT(control_port, 0);
  const std::string control = "127.0.0.1:" + std::to_string(control_port);
  const std::string bin = EXL3_BIN_DIR;

  LoggedChild coordinator({bin + "/exl3-coordinator", "--model", fixture_model_dir(), "--world", "1", "--port", "0",
                           "--control-port", std::to_string(control_port), "--max-seq-len", "256",
                           "--cluster-secret-file", secret_file},
                          "cluster-secret-coordinator");
  ASSERT_TRUE(coordinator.started()) << coordinator.error();
  ASSERT_TRUE(coordinator.wait_for("control plane on", std::chrono::seconds(60)))
      << "the coordinator did not open its control plane:\n" << coordinator.log();

  auto worker_argv = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {bin + "/exl3-worker", "--coordinator", control, "--rank", "0", "--world", "1",
                                     "--memory-gib", "4", "--connect-timeout", "30"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  // (a) no secret, (b) a wrong one: refused at registration, exit 1, naming the address and flag.
  const struct {
    std::vector<std::string> extra;
    std::string what;
  } refused[] = {{{}, "cluster secret missing"}, {{"--cluster-secret-file", wrong_file}, "cluster secret wrong"}};
  for (const auto& r : refused) {
    const CommandResult w = run_command(worker_argv(r.extra), std::chrono::seconds(60), "cluster-secret-refused");
    EXPECT_TRUE(w.exited_with(1)) << r.what << ": " << w.describe();
    EXPECT_NE(w.output.find(r.what), std::string::npos) << w.output;
    EXPECT_NE(w.output.find("--cluster-secret-file"), std::string::npos) << w.output;
    EXPECT_NE(w.output.find("the coordinator at " + control + " refused"), std::string::npos) << w.output;
    EXPECT_EQ(w.output.find(*secret), std::string::npos) << "the run's secret leaked:\n" << w.output;
    EXPECT_EQ(w.output.find(*wrong), std::string::npos) << "the worker's secret leaked:\n" << w.output;
  }
  // An empty secret file: exit 2 at once, naming the flag and the path.
  const CommandResult empty =
      run_command(worker_argv({"--cluster-secret-file", empty_file}), std::chrono::seconds(30), "cluster-secret-empty");
  EXPECT_TRUE(empty.exited_with(2)) << empty.describe();
  EXPECT_NE(empty.output.find("--cluster-secret-file " + empty_file), std::string::npos) << empty.output;

  // (c) the right secret: rank 0 is still free, the group loads and the public API serves.
  LoggedChild worker(worker_argv({"--cluster-secret-file", secret_file}), "cluster-secret-worker");
  ASSERT_TRUE(worker.started()) << worker.error();
  const std::optional<std::string> serving = coordinator.wait_for("serving on 127.0.0.1:", std::chrono::seconds(180));
  ASSERT_TRUE(serving) << "the coordinator did not serve:\n" << coordinator.log() << "\n--- worker ---\n" << worker.log();
  const int public_port = std::atoi(serving->c_str() + std::string("serving on 127.0.0.1:").size());
  ASSERT_GT(public_port, 0) << *serving;
  HealthStatus health = HealthResponse::UNKNOWN;
  const grpc::Status checked = health_check(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(public_port), grpc::InsecureChannelCredentials()), &health);
  EXPECT_TRUE(checked.ok()) << checked.error_message();
  EXPECT_EQ(health, HealthResponse::SERVING);
  EXPECT_FALSE(worker.exited()) << worker.log();

  const std::string logs = coordinator.log() + worker.log();
  EXPECT_EQ(logs.find(*secret), std::string::npos) << "the secret appears in a log:\n" << logs;
  for (const std::string& f : {secret_file, wrong_file, empty_file}) std::remove(f.c_str());
}

}  // namespace
}  // namespace exl3::testing
