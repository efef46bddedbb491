// Stats never waits behind a step: while one worker runs a long prefill step (a 1,800-token prompt
// on the CPU tiny model, hundreds of milliseconds), Stats calls issued during that step must come
// back quickly, with the worker memory reports the serving loop keeps between steps.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/launched_server.h"

namespace exl3::testing {
namespace {

using std::chrono::milliseconds;

TEST(StatsDuringStep, StatsReturnsWhileAPrefillStepRuns) {
  LaunchConfig config;
  config.workers = 1;
  config.max_seq_len = 2048;
  config.max_batch = 4;
  config.log_name = "stats_during_step";
  absl::StatusOr<std::unique_ptr<LaunchedServer>> started = LaunchedServer::start(config, std::chrono::seconds(60));
  ASSERT_TRUE(started.ok()) << started.status().message();
  auto stub = (*started)->stub();

  std::vector<int32_t> ids(1800);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(10 + (i * 37) % 3000);

  std::atomic<bool> done{false};
  StreamResult generated;
  std::jthread client([&] {
    generated = stream_generate(*stub, greedy(token_request(ids, 2)), std::chrono::seconds(120));
    done = true;
  });
  // Stats calls, back to back, until the stream ends: (start, end) of each.
  std::vector<std::pair<CallClock::time_point, CallClock::time_point>> calls;
  while (!done) {
    v1::StatsResponse s;
    const auto t0 = CallClock::now();
    const grpc::Status status = stats(*stub, &s, std::chrono::seconds(30));
    calls.push_back({t0, CallClock::now()});
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(s.workers_size(), 1);
    std::this_thread::sleep_for(milliseconds(2));
  }
  client.join();
  ASSERT_TRUE(generated.status.ok()) << generated.status.error_message() << "\n" << (*started)->log_tail();
  ASSERT_TRUE(generated.first_message.has_value());

  // The calls that started while the prompt's step ran (after the request was sent, before its
  // first token arrived), and the slowest of them.
  const auto window_begin = generated.started + milliseconds(20);
  const auto window_end = *generated.first_message;
  std::vector<double> during;
  for (const auto& [t0, t1] : calls) {
    if (t0 >= window_begin && t0 < window_end) during.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double ttft = std::chrono::duration<double, std::milli>(window_end - generated.started).count();
  std::sort(during.begin(), during.end());
  const double slowest = during.empty() ? 0.0 : during.back();
  std::printf("[stats] time to first token %.0f ms; %zu Stats calls during it, slowest %.1f ms\n", ttft, during.size(),
              slowest);
  // A Stats call that waited behind the step would take about the rest of the step; these must
  // each take a small part of it (and there must be several, or the prompt was too quick to tell).
  ASSERT_GE(during.size(), 3u) << "the prefill step was too short (" << ttft << " ms) to observe Stats during it";
  EXPECT_LT(slowest, ttft / 3) << "a Stats call waited " << slowest << " ms of a " << ttft << " ms step";
}

}  // namespace
}  // namespace exl3::testing
