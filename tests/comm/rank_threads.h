// Test helpers for the communicator tests: run a group of Gloo ranks as threads of this process
// (each with its own Gloo context, all through one store), exact-integer rank-dependent inputs,
// and a store prefix unique to the running test.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/communicator.h"

namespace exl3::testing {

// "<suite>.<test>/<tag>", unique per test (and per tag within a test).
inline std::string test_prefix(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name() + "/" + tag;
}

// Value element i of rank r holds: r * 1000 + i. Sums over up to 4 ranks stay below 2^24 for
// i < 4,000,000, so float results are exact.
inline float rank_value(int rank, size_t i) { return static_cast<float>(rank * 1000 + i); }

inline std::vector<float> rank_values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = rank_value(rank, i);
  return v;
}

inline GlooOptions gloo_options(int rank, int world_size, const std::string& prefix,
                                std::chrono::milliseconds timeout) {
  GlooOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.prefix = prefix;
  options.timeout = timeout;
  return options;
}

// Makes `world_size` Gloo communicators on as many threads and runs body(comm) on each; returns
// once every thread is done. Failures inside body are recorded by GoogleTest as usual.
inline void run_ranks(int world_size, RendezvousStore& store, const std::string& prefix,
                      std::chrono::milliseconds timeout,
                      const std::function<void(Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = make_gloo_communicator(gloo_options(rank, world_size, prefix, timeout), store);
      ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
      ASSERT_EQ((*comm)->rank(), rank);
      ASSERT_EQ((*comm)->world_size(), world_size);
      body(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

inline ::testing::AssertionResult has_substr(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace exl3::testing
