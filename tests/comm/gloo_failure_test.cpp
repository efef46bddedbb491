// Gloo communicator under failure: a rank that never joins, a peer destroyed mid-run, a peer that
// is alive but silent. Every case must end in a status within about the deadline, never a hang
// or an exception.
#include <atomic>
#include <thread>

#include "comm/rank_threads.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/in_memory_store.h"

namespace exl3 {
namespace {

using exl3::testing::gloo_options;
using exl3::testing::has_substr;
using exl3::testing::rank_values;
using exl3::testing::seconds_since;
using exl3::testing::test_prefix;

constexpr std::chrono::milliseconds kShort{1000};
// Scheduling noise allowed on top of a deadline (slow CI machines, sanitizer builds).
constexpr double kSlackSeconds = 1.5;

// Gloo's rendezvous waits for two keys per rank: "<rank>" (its TCP addresses) and, from the ranks
// above it, "rank_<rank>" (its hostname). A failure must name one of them.
::testing::AssertionResult names_missing_rank(const absl::Status& status, const std::string& prefix,
                                              int rank) {
  const std::string message(status.message());
  const std::string r = std::to_string(rank);
  if (message.ends_with(prefix + "/" + r) || message.ends_with(prefix + "/rank_" + r)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "'" << message << "' does not name the key of rank " << r;
}

// Makes the communicators of `ranks` (of a world of `world`) concurrently.
std::vector<std::unique_ptr<Communicator>> make_group(int world, const std::vector<int>& ranks,
                                                      RendezvousStore& store,
                                                      const std::string& prefix,
                                                      std::chrono::milliseconds timeout) {
  std::vector<std::unique_ptr<Communicator>> comms(ranks.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < ranks.size(); ++k) {
    threads.emplace_back([&, k] {
      auto comm = make_gloo_communicator(gloo_options(ranks[k], world, prefix, timeout), store);
      ASSERT_TRUE(comm.ok()) << comm.status();
      comms[k] = std::move(comm).value();
    });
  }
  for (std::thread& t : threads) t.join();
  return comms;
}

TEST(GlooFailure, RankThatNeverJoinsFailsRendezvousWithinTheTimeout) {
  InMemoryStore store;
  const std::string prefix = test_prefix();
  const int world = 3;
  std::vector<absl::Status> statuses(2);
  std::vector<double> elapsed(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {  // rank 2 never starts
    threads.emplace_back([&, rank] {
      const auto start = std::chrono::steady_clock::now();
      auto comm = make_gloo_communicator(gloo_options(rank, world, prefix, kShort), store);
      elapsed[rank] = seconds_since(start);
      statuses[rank] = comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kDeadlineExceeded) << statuses[rank];
    EXPECT_TRUE(names_missing_rank(statuses[rank], prefix, 2));
    EXPECT_TRUE(has_substr(std::string(statuses[rank].message()), "rank " + std::to_string(rank)));
    EXPECT_GE(elapsed[rank], 0.9);
    EXPECT_LT(elapsed[rank], 1.0 + kSlackSeconds);
  }
}

TEST(GlooFailure, LoneRankFailsRendezvousWithinTheTimeout) {
  InMemoryStore store;
  const auto start = std::chrono::steady_clock::now();
  auto comm = make_gloo_communicator(gloo_options(1, 2, test_prefix(), kShort), store);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_TRUE(names_missing_rank(comm.status(), test_prefix(), 0));
  EXPECT_LT(seconds_since(start), 1.0 + kSlackSeconds);
}

class GlooPeerLoss : public ::testing::TestWithParam<int> {};

TEST_P(GlooPeerLoss, SurvivorsFailFastAfterAPeerIsDestroyed) {
  const int world = GetParam();
  InMemoryStore store;
  std::vector<int> ranks(world);
  for (int r = 0; r < world; ++r) ranks[r] = r;
  auto comms = make_group(world, ranks, store, test_prefix(), kShort);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  for (const auto& c : comms) ASSERT_NE(c, nullptr);

  // One healthy round, then the last rank goes away while the others are idle.
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        std::vector<float> data = rank_values(r, 64);
        EXPECT_TRUE(comms[r]->all_reduce_sum(data).ok());
      });
    }
    for (std::thread& t : threads) t.join();
  }
  comms[world - 1].reset();

  std::vector<std::thread> threads;
  for (int r = 0; r < world - 1; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> data = rank_values(r, 64);
      const auto start = std::chrono::steady_clock::now();
      const absl::Status status = comms[r]->all_reduce_sum(data);
      // The closed socket is seen at once (UNAVAILABLE), long before the 1 s deadline.
      EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << "rank " << r << ": " << status;
      EXPECT_LT(seconds_since(start), 0.5) << "rank " << r;
      // The communicator is spent: later calls fail at once.
      const auto again = std::chrono::steady_clock::now();
      EXPECT_EQ(comms[r]->barrier().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_LT(seconds_since(again), 0.1);
    });
  }
  for (std::thread& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooPeerLoss, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

TEST(GlooFailure, SilentPeerGivesDeadlineExceededAndThenFailsItself) {
  InMemoryStore store;
  auto comms = make_group(2, {0, 1}, store, test_prefix(), kShort);
  ASSERT_TRUE(comms[0] && comms[1]);

  // Rank 1 is alive but does not take part: rank 0 waits out its deadline.
  std::vector<float> data = rank_values(0, 16);
  auto start = std::chrono::steady_clock::now();
  const absl::Status status = comms[0]->all_reduce_sum(data);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(seconds_since(start), 0.9);
  EXPECT_LT(seconds_since(start), 1.0 + kSlackSeconds);

  // Rank 0 closed its connections, so rank 1 learns of it without waiting its own deadline. Its
  // write to the closed socket raises SIGPIPE, which must not kill the process.
  std::vector<float> late = rank_values(1, 16);
  start = std::chrono::steady_clock::now();
  const absl::Status late_status = comms[1]->all_reduce_sum(late);
  EXPECT_EQ(late_status.code(), absl::StatusCode::kUnavailable) << late_status;
  EXPECT_LT(seconds_since(start), 0.5);
}

TEST(GlooFailure, RecvWithoutSenderTimesOut) {
  InMemoryStore store;
  auto comms = make_group(2, {0, 1}, store, test_prefix(), kShort);
  ASSERT_TRUE(comms[0] && comms[1]);
  std::vector<float> data(8);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = comms[0]->recv(data, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(has_substr(std::string(status.message()), "recv from rank 1"));
  EXPECT_LT(seconds_since(start), 1.0 + kSlackSeconds);
}

TEST(GlooFailure, SendToAPeerThatNeverReceivesTimesOut) {
  InMemoryStore store;
  auto comms = make_group(2, {0, 1}, store, test_prefix(), kShort);
  ASSERT_TRUE(comms[0] && comms[1]);
  const std::vector<float> data = rank_values(0, 8);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = comms[0]->send(data, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(seconds_since(start), 1.0 + kSlackSeconds);
}

TEST(GlooStoreAdapter, WaitEndsAtItsDeadlineWhateverGlooAsks) {
  InMemoryStore store;
  GlooStoreAdapter adapter(store, "p",
                           std::chrono::steady_clock::now() + std::chrono::milliseconds(300));
  adapter.set("present", {'x'});
  EXPECT_EQ(adapter.get("present"), std::vector<char>{'x'});
  std::vector<char> raw = store.get({"p/present"}, std::chrono::milliseconds(1)).value().at(0);
  EXPECT_EQ(raw, std::vector<char>{'x'});

  const auto start = std::chrono::steady_clock::now();
  try {
    adapter.wait({"present", "absent"}, std::chrono::hours(1));
    ADD_FAILURE() << "wait returned without the key";
  } catch (const GlooStoreError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(has_substr(std::string(e.status().message()), "p/absent"));
  }
  EXPECT_LT(seconds_since(start), 0.3 + kSlackSeconds);
}

}  // namespace
}  // namespace exl3
