// exl3-bench serve against an exl3-launch it starts on the embedded model (one CPU worker): two
// clients of 8 greedy tokens give 16 tokens and positive latency percentiles; bad flags fail.
#include "bench/serve_bench.h"

#include <fstream>
#include <string>
#include <vector>

#include "bench/exl3_bench_cli.h"
#include "bench/bench_cli.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using testing::run_bench;


TEST(ServeBench, PercentileIsNearestRank) {
  EXPECT_EQ(percentile({}, 50), 0.0);
  EXPECT_EQ(percentile({3.0, 1.0, 2.0}, 50), 2.0);
  EXPECT_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99), 10.0);
  EXPECT_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 50), 5.0);
  EXPECT_EQ(percentile({4.0}, 0), 4.0);
}

TEST(ServeBench, LaunchedServerTwoClientsOfEightTokens) {
  const std::string json_path = std::string(EXL3_TEST_WORK_DIR) + "/serve_bench_test.json";
  const std::string model = std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw";
  std::string err;
  const int rc =
      run_bench({"serve", "--launch", "--model " + model + " --cpu-workers 1 --max-seq-len 512", "--launch-bin",
                 std::string(EXL3_BIN_DIR) + "/exl3-launch", "--clients", "2", "--max-new-tokens", "8",
                 "--prompt-tokens", "16", "--ready-timeout", "120", "--request-timeout", "120", "--json", json_path},
                &err);
  ASSERT_EQ(rc, 0) << err;
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << json_path;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("mode"), "serve");
  EXPECT_TRUE(j.at("launched").get<bool>());
  ASSERT_EQ(j.at("rounds").size(), 1u) << j.dump(2);
  const nlohmann::json& r = j.at("rounds").at(0);
  SCOPED_TRACE(r.dump(2));
  EXPECT_EQ(r.at("clients"), 2);
  EXPECT_EQ(r.at("total_tokens"), 16);
  EXPECT_GT(r.at("tokens_per_s").get<double>(), 0.0);
  for (const char* metric : {"ttft_s", "itl_s"}) {
    EXPECT_GT(r.at(metric).at("p50").get<double>(), 0.0) << metric;
    EXPECT_GT(r.at(metric).at("p99").get<double>(), 0.0) << metric;
    EXPECT_GE(r.at(metric).at("p99").get<double>(), r.at(metric).at("p50").get<double>()) << metric;
  }
  EXPECT_EQ(r.at("ttft_s").at("count"), 2);
  EXPECT_EQ(r.at("itl_s").at("count"), 14);  // 7 gaps per 8-token stream
}

TEST(ServeBench, BadFlagsFailWithMessages) {
  std::string err;
  EXPECT_NE(run_bench({"serve"}, &err), 0);
  EXPECT_NE(err.find("--server"), std::string::npos) << err;
  EXPECT_NE(run_bench({"serve", "--server", "127.0.0.1:1", "--launch", "--model x"}, &err), 0);
  EXPECT_NE(err.find("excludes"), std::string::npos) << err;
  EXPECT_NE(run_bench({"serve", "--server", "127.0.0.1:1", "--clients", "0"}, &err), 0);
  EXPECT_NE(err.find("--clients"), std::string::npos) << err;
  EXPECT_NE(run_bench({"serve", "--launch", "--model x", "--launch-bin", "/nonexistent/exl3-launch"}, &err), 0);
  EXPECT_NE(err.find("exl3-launch not found"), std::string::npos) << err;
  // Nothing listens on port 1: the first call fails fast with the address in the message.
  EXPECT_NE(run_bench({"serve", "--server", "127.0.0.1:1", "--clients", "1"}, &err), 0);
  EXPECT_NE(err.find("127.0.0.1:1"), std::string::npos) << err;
}

}  // namespace
}  // namespace exl3
