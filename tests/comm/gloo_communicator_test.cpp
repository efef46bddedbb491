// Gloo communicator collectives with 2, 3 and 4 ranks as threads, checked with exact-integer,
// rank-dependent inputs; argument errors; the single-rank communicator.
#include "worker/comm/gloo_communicator.h"

#include <atomic>
#include <numeric>

#include "comm/rank_threads.h"
#include "gtest/gtest.h"
#include "worker/comm/in_memory_store.h"

namespace exl3 {
namespace {

using exl3::testing::rank_value;
using exl3::testing::rank_values;
using exl3::testing::run_ranks;
using exl3::testing::test_prefix;

constexpr std::chrono::milliseconds kTimeout{10000};

class GlooCollectives : public ::testing::TestWithParam<int> {
 protected:
  int world() const { return GetParam(); }
  InMemoryStore store_;
};

TEST_P(GlooCollectives, AllReduceSumIsExact) {
  const int n = world();
  // 300,001 floats span two of Gloo's 1 MiB ring segments; the small sizes cover fewer elements
  // than ranks and a count that does not divide evenly.
  const std::vector<size_t> sizes = {1, 3, 4099, 300001};
  run_ranks(n, store_, test_prefix(), kTimeout, [&](Communicator& comm) {
    for (size_t size : sizes) {
      std::vector<float> data = rank_values(comm.rank(), size);
      ASSERT_TRUE(comm.all_reduce_sum(data).ok()) << "size " << size;
      size_t mismatches = 0;
      for (size_t i = 0; i < size; ++i) {
        // sum over r of (r * 1000 + i)
        const float expected = static_cast<float>(1000 * n * (n - 1) / 2 + n * i);
        if (data[i] != expected && mismatches++ < 5) {
          ADD_FAILURE() << "rank " << comm.rank() << " size " << size << " [" << i
                        << "]: " << data[i] << " != " << expected;
        }
      }
      EXPECT_EQ(mismatches, 0u) << "rank " << comm.rank() << " size " << size;
    }
  });
}

TEST_P(GlooCollectives, AllGatherWithUnevenCountsAndAnEmptyRank) {
  const int n = world();
  // Rank 1 contributes nothing; the others 2r + 3 elements.
  std::vector<int64_t> counts(n);
  for (int r = 0; r < n; ++r) counts[r] = r == 1 ? 0 : 2 * r + 3;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> expected;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < counts[r]; ++i) expected.push_back(rank_value(r, i));
  }
  run_ranks(n, store_, test_prefix(), kTimeout, [&](Communicator& comm) {
    const std::vector<float> send = rank_values(comm.rank(), counts[comm.rank()]);
    std::vector<float> recv(total, -1.0f);
    ASSERT_TRUE(comm.all_gather(send, recv, counts).ok());
    EXPECT_EQ(recv, expected) << "rank " << comm.rank();
  });
}

TEST_P(GlooCollectives, BroadcastFromNonZeroRoots) {
  const int n = world();
  run_ranks(n, store_, test_prefix(), kTimeout, [&](Communicator& comm) {
    for (int root : {n - 1, 1}) {
      std::vector<float> data(1025, -1.0f);
      if (comm.rank() == root) data = rank_values(root, data.size());
      ASSERT_TRUE(comm.broadcast(data, root).ok());
      EXPECT_EQ(data, rank_values(root, data.size())) << "rank " << comm.rank() << " root " << root;
    }
  });
}

TEST_P(GlooCollectives, SendRecvAroundTheRing) {
  const int n = world();
  run_ranks(n, store_, test_prefix(), kTimeout, [&](Communicator& comm) {
    const int next = (comm.rank() + 1) % n;
    const int prev = (comm.rank() + n - 1) % n;
    const std::vector<float> out = rank_values(comm.rank(), 777);
    std::vector<float> in(out.size(), -1.0f);
    // Gloo's send waits for the matching recv, so half the ring receives first.
    if (comm.rank() % 2 == 0) {
      ASSERT_TRUE(comm.send(out, next).ok());
      ASSERT_TRUE(comm.recv(in, prev).ok());
    } else {
      ASSERT_TRUE(comm.recv(in, prev).ok());
      ASSERT_TRUE(comm.send(out, next).ok());
    }
    EXPECT_EQ(in, rank_values(prev, in.size())) << "rank " << comm.rank();
  });
}

TEST_P(GlooCollectives, BarrierWaitsForEveryRank) {
  const int n = world();
  std::atomic<int> arrived{0};
  run_ranks(n, store_, test_prefix(), kTimeout, [&](Communicator& comm) {
    for (int round = 1; round <= 3; ++round) {
      // Later ranks arrive later; nobody may leave the barrier before the last one arrives.
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * comm.rank()));
      arrived.fetch_add(1);
      ASSERT_TRUE(comm.barrier().ok());
      EXPECT_GE(arrived.load(), round * n) << "rank " << comm.rank() << " round " << round;
      // Second barrier so that no rank starts the next round before all have checked.
      ASSERT_TRUE(comm.barrier().ok());
    }
  });
}

TEST_P(GlooCollectives, BadArgumentsFailLocallyAndLeaveTheGroupUsable) {
  const int n = world();
  run_ranks(n, store_, test_prefix(), kTimeout, [&](Communicator& comm) {
    std::vector<float> data(4, 1.0f);
    EXPECT_EQ(comm.broadcast(data, n).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.broadcast(data, -1).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.send(data, comm.rank()).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.recv(data, n).code(), absl::StatusCode::kInvalidArgument);
    std::vector<int64_t> counts(n, 4);
    std::vector<float> recv(4 * n);
    EXPECT_EQ(comm.all_gather(data, recv, std::span<const int64_t>(counts).first(n - 1)).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.all_gather(std::span<const float>(data).first(3), recv, counts).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.all_gather(data, std::span<float>(recv).first(4 * n - 1), counts).code(),
              absl::StatusCode::kInvalidArgument);
    counts[0] = -1;
    EXPECT_EQ(comm.all_gather(data, recv, counts).code(), absl::StatusCode::kInvalidArgument);

    std::vector<float> values = rank_values(comm.rank(), 5);
    ASSERT_TRUE(comm.all_reduce_sum(values).ok());
    EXPECT_EQ(values[4], static_cast<float>(1000 * n * (n - 1) / 2 + n * 4));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooCollectives, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

TEST(GlooCommunicator, WorldOfOneRunsEveryCollective) {
  InMemoryStore store;
  run_ranks(1, store, test_prefix(), kTimeout, [&](Communicator& comm) {
    std::vector<float> data = rank_values(0, 9);
    ASSERT_TRUE(comm.all_reduce_sum(data).ok());
    EXPECT_EQ(data, rank_values(0, 9));
    std::vector<float> recv(9);
    const std::vector<int64_t> counts = {9};
    ASSERT_TRUE(comm.all_gather(data, recv, counts).ok());
    EXPECT_EQ(recv, data);
    ASSERT_TRUE(comm.broadcast(data, 0).ok());
    ASSERT_TRUE(comm.barrier().ok());
  });
}

TEST(GlooCommunicator, RejectsBadOptions) {
  InMemoryStore store;
  auto options = exl3::testing::gloo_options(2, 2, test_prefix(), kTimeout);
  EXPECT_EQ(make_gloo_communicator(options, store).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = exl3::testing::gloo_options(0, 2, test_prefix(), std::chrono::milliseconds(0));
  EXPECT_EQ(make_gloo_communicator(options, store).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = exl3::testing::gloo_options(0, 2, "", kTimeout);
  EXPECT_EQ(make_gloo_communicator(options, store).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicator, RejectsAHostItCannotBindTo) {
  InMemoryStore store;
  auto options = exl3::testing::gloo_options(0, 2, test_prefix(), kTimeout);
  options.host = "192.0.2.1";  // TEST-NET-1: never an address of this machine
  const auto comm = make_gloo_communicator(options, store);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << comm.status();
  EXPECT_TRUE(exl3::testing::has_substr(std::string(comm.status().message()), "192.0.2.1"));
}

TEST(SingleRankCommunicator, CopiesAndChecksArguments) {
  auto comm = make_single_rank_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  std::vector<float> data = rank_values(0, 6);
  ASSERT_TRUE(comm->all_reduce_sum(data).ok());
  EXPECT_EQ(data, rank_values(0, 6));
  std::vector<float> recv(6, -1.0f);
  const std::vector<int64_t> counts = {6};
  ASSERT_TRUE(comm->all_gather(data, recv, counts).ok());
  EXPECT_EQ(recv, data);
  EXPECT_TRUE(comm->broadcast(data, 0).ok());
  EXPECT_EQ(comm->broadcast(data, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->send(data, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->recv(data, 1).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> wrong = {5};
  EXPECT_EQ(comm->all_gather(data, recv, wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm->barrier().ok());
}

}  // namespace
}  // namespace exl3
