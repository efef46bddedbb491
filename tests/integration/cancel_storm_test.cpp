// Cancellation at random points under load (issue P5, acceptance 2): 1,000 streams cancelled at
// random moments (client deadlines of 1-60 ms, and cancels after a random number of messages) while
// 16 long greedy streams run on two CPU workers. The 16 must finish with exactly the tokens they get
// when run alone, and afterwards every KV page must be free again (Stats) and the server idle.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/launched_server.h"

namespace exl3::testing {
namespace {

using std::chrono::milliseconds;

v1::GenerateRequest long_request(int i) {
  return greedy(text_request("Stream " + std::to_string(i) + " of the storm: once upon a time", 48));
}

TEST(CancelStorm, ThousandCancelledStreamsLeakNoPagesAndSpareTheOthers) {
  LaunchConfig config;
  config.workers = 2;
  config.max_seq_len = 512;
  config.max_batch = 16;
  config.log_name = "cancel_storm";
  absl::StatusOr<std::unique_ptr<LaunchedServer>> started = LaunchedServer::start(config, std::chrono::seconds(60));
  ASSERT_TRUE(started.ok()) << started.status().message();
  LaunchedServer& server = **started;
  auto stub = server.stub();

  constexpr int kLong = 16;
  constexpr int kCancelled = 1000;
  constexpr int kCancelThreads = 8;
  // The long streams alone first: their expected tokens.
  std::vector<std::vector<int32_t>> expected(kLong);
  for (int i = 0; i < kLong; ++i) {
    const StreamResult r = stream_generate(*stub, long_request(i), std::chrono::seconds(120));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << server.log_tail();
    expected[i] = r.tokens;
  }

  std::atomic<int> cancelled_done{0}, cancelled_ok{0}, cancelled_other{0};
  std::vector<StreamResult> long_results(kLong);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kLong; ++i) {
      threads.emplace_back([&, i] { long_results[i] = stream_generate(*stub, long_request(i), std::chrono::seconds(300)); });
    }
    for (int t = 0; t < kCancelThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(1234 + t);
        for (int j = t; j < kCancelled; j += kCancelThreads) {
          const v1::GenerateRequest request = text_request("cancel me " + std::to_string(j), 200);
          StreamResult r;
          if (rng() % 2 == 0) {
            // A deadline somewhere in the prompt's prefill or the first tokens.
            r = stream_generate(*stub, request, milliseconds(1 + rng() % 60));
          } else {
            // A cancel after a random number of messages (0: right after the call starts).
            grpc::ClientContext context;
            set_timeout(context, std::chrono::seconds(60));
            auto reader = stub->Generate(&context, request);
            const int after = static_cast<int>(rng() % 6);
            v1::GenerateResponse response;
            for (int m = 0; m < after && reader->Read(&response); ++m) {
            }
            context.TryCancel();
            while (reader->Read(&response)) {
            }
            r.status = reader->Finish();
          }
          const grpc::StatusCode code = r.status.error_code();
          if (code == grpc::StatusCode::OK) {
            ++cancelled_ok;  // finished before its cancel: fine
          } else if (code != grpc::StatusCode::CANCELLED && code != grpc::StatusCode::DEADLINE_EXCEEDED) {
            ++cancelled_other;
            std::fprintf(stderr, "cancelled stream %d: %s %s\n", j, code_name(code).c_str(), r.status.error_message().c_str());
          }
          ++cancelled_done;
        }
      });
    }
  }
  EXPECT_EQ(cancelled_done.load(), kCancelled);
  EXPECT_EQ(cancelled_other.load(), 0) << "cancelled streams ended with other errors";
  for (int i = 0; i < kLong; ++i) {
    ASSERT_TRUE(long_results[i].status.ok()) << "long stream " << i << ": " << long_results[i].status.error_message();
    EXPECT_EQ(long_results[i].tokens, expected[i]) << "long stream " << i << " differs from its run alone";
  }

  // Every page comes back once the cancelled requests are released (within a few seconds).
  v1::StatsResponse s;
  const auto deadline = TestClock::now() + std::chrono::seconds(10);
  do {
    ASSERT_TRUE(stats(*stub, &s).ok());
    if (s.free_kv_pages() == s.total_kv_pages() && s.running_requests() == 0 && s.queued_requests() == 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  } while (TestClock::now() < deadline);
  std::printf("[storm] %d cancelled streams (%d finished first), pages free %lld of %lld, completed %lld\n",
              kCancelled, cancelled_ok.load(), static_cast<long long>(s.free_kv_pages()),
              static_cast<long long>(s.total_kv_pages()), static_cast<long long>(s.completed_requests()));
  EXPECT_EQ(s.free_kv_pages(), s.total_kv_pages()) << "KV pages leaked";
  EXPECT_EQ(s.running_requests(), 0);
  EXPECT_EQ(s.queued_requests(), 0);
}

}  // namespace
}  // namespace exl3::testing
