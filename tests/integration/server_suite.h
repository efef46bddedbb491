// A GoogleTest fixture whose tests share one launched server: a suite derives from ServerSuite
// and calls start_server() from its SetUpTestSuite. The server stops at the end of the suite with
// SIGTERM, which must drain it and exit 0 leaving no worker behind; a test that fails prints the
// tail of the launcher's log. One ServerSuite per test executable (the server is a static).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "integration/launched_server.h"

namespace exl3::testing {

class ServerSuite : public ::testing::Test {
 protected:
  static void start_server(const LaunchConfig& config) {
    absl::StatusOr<std::unique_ptr<LaunchedServer>> s = LaunchedServer::start(config, std::chrono::seconds(60));
    if (!s.ok()) {
      start_error_ = std::string(s.status().message());
      return;
    }
    server_ = *std::move(s);
    server_->worker_pids(static_cast<size_t>(config.workers), TestClock::now() + std::chrono::seconds(10));
  }

  static void TearDownTestSuite() {
    if (!server_) return;
    const std::vector<pid_t> known_workers = server_->known_workers();
    const std::optional<int> exit = server_->stop(std::chrono::seconds(20));
    const bool clean = exit.has_value() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0;
    EXPECT_TRUE(clean) << (exit ? describe_wait_status(*exit) : std::string("still running 20 s after SIGTERM"));
    if (!clean) std::fprintf(stderr, "--- launcher log (tail) ---\n%s\n", server_->log_tail().c_str());
    server_.reset();
    // A clean stop reaps every worker before exiting; after a crash they go through PDEATHSIG.
    const auto grace = clean ? std::chrono::seconds(0) : std::chrono::seconds(5);
    for (pid_t w : still_present(known_workers, TestClock::now() + grace))
      ADD_FAILURE() << "worker " << w << " left behind";
  }

  void SetUp() override { ASSERT_TRUE(server_ != nullptr) << "exl3-launch did not start: " << start_error_; }

  void TearDown() override {
    if (HasFailure() && server_) {
      std::fprintf(stderr, "--- launcher log (tail) ---\n%s\n", server_->log_tail().c_str());
    }
  }

  static LaunchedServer& server() { return *server_; }

 private:
  static inline std::unique_ptr<LaunchedServer> server_;
  static inline std::string start_error_;
};

// A ServerSuite whose tests call the public API through one stub each (stub_).
class ApiSuite : public ServerSuite {
 protected:
  void SetUp() override {
    ServerSuite::SetUp();
    if (!HasFatalFailure()) stub_ = server().stub();
  }

  std::unique_ptr<v1::Inference::Stub> stub_;
};

}  // namespace exl3::testing
