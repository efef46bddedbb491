// A worker whose model copy differs from the coordinator's (as on another host with a stale or
// edited copy) is refused at load: exl3-coordinator exits non-zero naming the worker's rank and
// the file that differs, instead of serving with mismatched weights or config.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "integration/free_port.h"
#include "integration/launched_server.h"
#include "integration/run_command.h"

namespace exl3::testing {
namespace {

namespace fs = std::filesystem;

// A copy of the fixture model whose config.json has one more trailing space.
std::string edited_model_copy() {
  const fs::path dir = fs::path(EXL3_TEST_WORK_DIR) / ("edited-model-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(fixture_model_dir())) {
    fs::copy_file(e.path(), dir / e.path().filename());
  }
  std::ofstream(dir / "config.json", std::ios::app) << " ";
  return dir.string();
}

TEST(ModelCopyCheck, CoordinatorRefusesAWorkerWithAnotherCopy) {
  const int control_port = free_port();
  ASSERT_GT(control_port, 0);
  const std::string control = "127.0.0.1:" + std::to_string(control_port);
  const std::string copy = edited_model_copy();

  const std::string worker_log = std::string(EXL3_TEST_WORK_DIR) + "/model-copy-worker-" + std::to_string(::getpid()) +
                                 ".log";
  UniqueFd log(::open(worker_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_GE(log.get(), 0);
  ChildLaunch launch;
  launch.argv = {std::string(EXL3_BIN_DIR) + "/exl3-worker", "--coordinator", control, "--rank", "0", "--world", "1",
                 "--model", copy, "--memory-gib", "4", "--connect-timeout", "60"};
  launch.stdout_fd = log.get();
  launch.stderr_fd = log.get();
  absl::StatusOr<StartedChild> worker = start_child(launch);
  ASSERT_TRUE(worker.ok()) << worker.status();

  const CommandResult coordinator =
      run_command({std::string(EXL3_BIN_DIR) + "/exl3-coordinator", "--model", fixture_model_dir(), "--world", "1",
                   "--port", "0", "--control-port", std::to_string(control_port), "--max-seq-len", "256"},
                  std::chrono::seconds(90), "model-copy-coordinator");
  ::kill(worker->pid, SIGKILL);
  ::waitpid(worker->pid, nullptr, 0);

  EXPECT_TRUE(coordinator.failed()) << coordinator.describe();
  EXPECT_NE(coordinator.output.find("worker rank 0"), std::string::npos) << coordinator.output;
  EXPECT_NE(coordinator.output.find("config.json"), std::string::npos) << coordinator.output;
  EXPECT_NE(coordinator.output.find("differs from the coordinator's"), std::string::npos) << coordinator.output;
  fs::remove_all(copy);
}

}  // namespace
}  // namespace exl3::testing
