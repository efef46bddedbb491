// A worker that dies mid-generation: SIGKILL one of the two exl3-worker processes of a launched
// server while four long streams are producing tokens. Without --restart every stream must end
// with UNAVAILABLE within 5 s, the launcher must exit non-zero within 10 s, and no process of the
// group may remain. With --restart the launcher must serve again (a new "serving on" line, new
// workers, a request that succeeds on the new address) and still stop cleanly on SIGTERM.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/launched_server.h"

namespace exl3::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

double seconds_between(TestClock::time_point a, TestClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

absl::StatusOr<std::unique_ptr<LaunchedServer>> launch(bool restart, const std::string& log_name) {
  LaunchConfig config;
  config.workers = 2;
  config.mode = "tp";
  config.max_seq_len = 512;
  config.max_batch = 8;
  config.restart = restart;
  config.log_name = log_name;
  return LaunchedServer::start(config, seconds(60));
}

// The launcher and every worker pid it ever had are gone (exited and reaped).
void expect_no_process_left(const LaunchedServer& server) {
  EXPECT_TRUE(process_gone(server.pid())) << "exl3-launch pid " << server.pid() << " still exists";
  for (pid_t w : server.known_workers()) {
    EXPECT_TRUE(process_gone(w)) << "exl3-worker pid " << w << " still exists: " << process_cmdline(w);
  }
}

TEST(WorkerFailure, KilledWorkerFailsStreamsAndStopsTheLauncher) {
  absl::StatusOr<std::unique_ptr<LaunchedServer>> started = launch(false, "worker_failure");
  ASSERT_TRUE(started.ok()) << started.status().message();
  LaunchedServer& server = **started;
  const std::vector<pid_t> workers = server.worker_pids(2, TestClock::now() + seconds(10));
  ASSERT_EQ(workers.size(), 2u) << server.log_tail();

  constexpr int kStreams = 4;
  std::atomic<int> flowing{0};
  std::vector<StreamResult> results(kStreams);
  std::vector<std::jthread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      std::unique_ptr<v1::Inference::Stub> stub = server.stub();
      v1::GenerateRequest r = text_request("Once upon a time, in a land far away,", 400);
      r.mutable_sampling()->set_temperature(0.8f);
      r.mutable_sampling()->set_seed(100 + static_cast<uint64_t>(i));
      r.mutable_stopping()->set_ignore_eos(true);
      bool counted = false;
      results[static_cast<size_t>(i)] = stream_generate(*stub, r, seconds(60), [&](const v1::GenerateResponse& m) {
        if (!counted && m.token_ids_size() > 0) {
          counted = true;
          ++flowing;
        }
      });
    });
  }
  const auto flow_deadline = TestClock::now() + seconds(30);
  while (flowing.load() < kStreams && TestClock::now() < flow_deadline) std::this_thread::sleep_for(milliseconds(5));
  if (flowing.load() < kStreams) {
    // End the streams now rather than at their 60 s deadline.
    server.signal(SIGKILL);
    FAIL() << "not every stream produced tokens within 30 s\n" << server.log_tail();
  }

  const auto killed_at = TestClock::now();
  ASSERT_EQ(::kill(workers[1], SIGKILL), 0);
  for (std::jthread& t : clients) t.join();

  double slowest = 0;
  for (int i = 0; i < kStreams; ++i) {
    const StreamResult& r = results[static_cast<size_t>(i)];
    SCOPED_TRACE("stream " + std::to_string(i));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << describe(r.status);
    EXPECT_LT(r.tokens.size(), 400u);
    const double after_kill = seconds_between(killed_at, r.finished);
    slowest = std::max(slowest, after_kill);
    EXPECT_LT(after_kill, 5.0) << "UNAVAILABLE came " << after_kill << " s after the kill";
    std::printf("[timing] stream %d: %zu tokens, %s %.3f s after SIGKILL (%s)\n", i, r.tokens.size(),
                code_name(r.status.error_code()).c_str(), after_kill, r.status.error_message().c_str());
  }

  const std::optional<int> exit = server.wait_exit(killed_at + seconds(15));
  ASSERT_TRUE(exit.has_value()) << "exl3-launch still running 15 s after the kill\n" << server.log_tail();
  const double exit_after = seconds_between(killed_at, TestClock::now());
  std::printf("[timing] slowest UNAVAILABLE %.3f s, launcher exit %.3f s after SIGKILL (%s)\n", slowest, exit_after,
              describe_wait_status(*exit).c_str());
  EXPECT_LT(exit_after, 10.0);
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0) << describe_wait_status(*exit);
  expect_no_process_left(server);
  if (HasFailure()) std::fprintf(stderr, "--- launcher log (tail) ---\n%s\n", server.log_tail().c_str());
}

TEST(WorkerFailure, RestartServesAgainAndStopsOnSigterm) {
  absl::StatusOr<std::unique_ptr<LaunchedServer>> started = launch(true, "worker_failure_restart");
  ASSERT_TRUE(started.ok()) << started.status().message();
  LaunchedServer& server = **started;
  const std::string first_address = server.address();
  const std::vector<pid_t> first_workers = server.worker_pids(2, TestClock::now() + seconds(10));
  ASSERT_EQ(first_workers.size(), 2u) << server.log_tail();

  const auto killed_at = TestClock::now();
  ASSERT_EQ(::kill(first_workers[0], SIGKILL), 0);
  const absl::Status again = server.wait_serving_again(killed_at + seconds(60));
  ASSERT_TRUE(again.ok()) << again.message() << "\n" << server.log_tail();
  std::printf("[timing] serving again %.3f s after SIGKILL: %s -> %s\n", seconds_between(killed_at, TestClock::now()),
              first_address.c_str(), server.address().c_str());

  // The old group is gone (the launcher reaped it) and a new one serves.
  for (pid_t w : first_workers) EXPECT_TRUE(process_gone(w)) << "old worker " << w << " still exists";
  const std::vector<pid_t> new_workers = server.worker_pids(2, TestClock::now() + seconds(10));
  ASSERT_EQ(new_workers.size(), 2u);
  for (pid_t w : new_workers) {
    EXPECT_EQ(std::find(first_workers.begin(), first_workers.end(), w), first_workers.end());
  }
  HealthStatus health = HealthResponse::UNKNOWN;
  const grpc::Status checked = health_check(server.channel(), &health);
  EXPECT_TRUE(checked.ok()) << describe(checked);
  EXPECT_EQ(health, HealthResponse::SERVING);
  const StreamResult r = stream_generate(*server.stub(), greedy(text_request("After the restart", 8)), seconds(30));
  ASSERT_TRUE(r.status.ok()) << describe(r.status) << "\n" << server.log_tail();
  EXPECT_NE(r.finish_reason, v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_GE(r.tokens.size(), 1u);

  const auto term_at = TestClock::now();
  ASSERT_TRUE(server.signal(SIGTERM));
  const std::optional<int> exit = server.wait_exit(term_at + seconds(30));
  ASSERT_TRUE(exit.has_value()) << "exl3-launch still running 30 s after SIGTERM\n" << server.log_tail();
  std::printf("[timing] exit %.3f s after SIGTERM (%s)\n", seconds_between(term_at, TestClock::now()),
              describe_wait_status(*exit).c_str());
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << describe_wait_status(*exit);
  expect_no_process_left(server);
  if (HasFailure()) std::fprintf(stderr, "--- launcher log (tail) ---\n%s\n", server.log_tail().c_str());
}

}  // namespace
}  // namespace exl3::testing
