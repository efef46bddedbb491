// InMemoryStore: values in key order, waits across threads, real deadlines that name the missing
// keys, close() waking waiters, erase_prefix.
#include "worker/comm/in_memory_store.h"

#include <thread>

#include "comm/rank_threads.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

using exl3::testing::has_substr;
using exl3::testing::seconds_since;
using std::chrono::milliseconds;

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(InMemoryStore, ReturnsValuesInKeyOrder) {
  InMemoryStore store;
  ASSERT_TRUE(store.set("a", bytes("1")).ok());
  ASSERT_TRUE(store.set("b", bytes("")).ok());
  ASSERT_TRUE(store.set("c", bytes(std::string("x\0y", 3))).ok());
  auto values = store.get({"c", "a", "b"}, milliseconds(10));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::vector<char>>{bytes(std::string("x\0y", 3)), bytes("1"),
                                                      bytes("")}));
  ASSERT_TRUE(store.set("a", bytes("2")).ok());  // overwrite
  EXPECT_EQ(store.get({"a"}, milliseconds(10)).value().at(0), bytes("2"));
  EXPECT_EQ(store.size(), 3u);
}

TEST(InMemoryStore, GetWaitsForKeysSetByOtherThreads) {
  InMemoryStore store;
  std::thread writer([&] {
    for (const char* key : {"k0", "k1", "k2"}) {
      std::this_thread::sleep_for(milliseconds(50));
      EXPECT_TRUE(store.set(key, bytes(key)).ok());
    }
  });
  const auto start = std::chrono::steady_clock::now();
  auto values = store.get({"k2", "k0", "k1"}, milliseconds(5000));
  writer.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(values->at(0), bytes("k2"));
  EXPECT_GE(seconds_since(start), 0.1);
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(InMemoryStore, MissingKeysGiveDeadlineExceededNamingThem) {
  InMemoryStore store;
  ASSERT_TRUE(store.set("here", bytes("v")).ok());
  const auto start = std::chrono::steady_clock::now();
  auto values = store.get({"here", "gone/1", "gone/2"}, milliseconds(200));
  const double elapsed = seconds_since(start);
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string message(values.status().message());
  EXPECT_TRUE(has_substr(message, "gone/1, gone/2"));
  EXPECT_FALSE(has_substr(message, "here"));
  EXPECT_GE(elapsed, 0.19);
  EXPECT_LT(elapsed, 1.0);
}

TEST(InMemoryStore, NonPositiveTimeoutChecksOnce) {
  InMemoryStore store;
  EXPECT_EQ(store.get({"x"}, milliseconds(0)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(store.set("x", bytes("1")).ok());
  EXPECT_TRUE(store.get({"x"}, milliseconds(-5)).ok());
}

TEST(InMemoryStore, CloseWakesWaitersAndRefusesLaterCalls) {
  InMemoryStore store;
  absl::Status waiter_status;
  double waited = 0;
  std::thread waiter([&] {
    const auto start = std::chrono::steady_clock::now();
    waiter_status = store.get({"never"}, milliseconds(10000)).status();
    waited = seconds_since(start);
  });
  std::this_thread::sleep_for(milliseconds(50));
  store.close();
  waiter.join();
  EXPECT_EQ(waiter_status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(waited, 2.0);
  EXPECT_EQ(store.set("k", bytes("v")).code(), absl::StatusCode::kCancelled);
}

TEST(InMemoryStore, ErasePrefixRemovesOneRunsKeys) {
  InMemoryStore store;
  for (const char* key : {"run1/0", "run1/1", "run10/0", "run2/0"}) {
    ASSERT_TRUE(store.set(key, bytes("v")).ok());
  }
  EXPECT_EQ(store.erase_prefix("run1/"), 2u);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.get({"run10/0", "run2/0"}, milliseconds(1)).ok());
}

}  // namespace
}  // namespace exl3
