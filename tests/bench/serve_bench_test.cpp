// exl3-bench serve against an exl3-launch it starts on the embedded model (one CPU worker): two
// clients of 8 greedy tokens give 16 tokens and positive latency percentiles; bad flags fail. With
// the largest default stop set (64 x 256 bytes) on an extra client the run completes and the
// measured figures count only the measured clients. exl3-bench soak: 4 random clients for 10 s on
// 2 CPU workers exit 0 with no unexpected errors and every KV page free.
#include "bench/serve_bench.h"

#include <set>

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

TEST(ServeBench, UnmatchedStopStringsHaveTheAskedShape) {
  const std::vector<std::string> set = unmatched_stop_strings(64, 256);
  ASSERT_EQ(set.size(), 64u);
  std::set<std::string> distinct(set.begin(), set.end());
  EXPECT_EQ(distinct.size(), 64u);
  for (const std::string& s : set) {
    ASSERT_EQ(s.size(), 256u);
    for (char c : s) ASSERT_TRUE(c >= 1 && c <= 8) << static_cast<int>(c);
  }
}

TEST(ServeBench, LargestDefaultStopSetOnAnExtraClient) {
  const std::string json_path = std::string(EXL3_TEST_WORK_DIR) + "/serve_bench_stop_test.json";
  const std::string model = std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw";
  std::string err;
  const int rc = run_bench({"serve", "--launch", "--model " + model + " --cpu-workers 1 --max-seq-len 512",
                            "--launch-bin", std::string(EXL3_BIN_DIR) + "/exl3-launch", "--clients", "2",
                            "--max-new-tokens", "8", "--prompt-tokens", "16", "--stop-strings", "64",
                            "--stop-string-bytes", "256", "--ready-timeout", "120", "--request-timeout", "120",
                            "--json", json_path},
                           &err);
  ASSERT_EQ(rc, 0) << err;
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << json_path;
  const nlohmann::json j = nlohmann::json::parse(in);
  SCOPED_TRACE(j.dump(2));
  EXPECT_EQ(j.at("stop_string_client").at("stop_strings"), 64);
  EXPECT_EQ(j.at("stop_string_client").at("total_bytes"), 16384);
  const nlohmann::json& r = j.at("rounds").at(0);
  EXPECT_EQ(r.at("total_tokens"), 16);  // the measured clients only
  EXPECT_EQ(r.at("itl_s").at("count"), 14);
  EXPECT_GE(r.at("stop_string_client").at("requests").get<int>(), 1);
  // Never matched: every request of the extra client ran its 8 tokens.
  EXPECT_EQ(r.at("stop_string_client").at("tokens").get<int>(),
            8 * r.at("stop_string_client").at("requests").get<int>());
}

TEST(ServeBench, TooManyStopStringsAreRefusedByName) {
  const std::string model = std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw";
  std::string err;
  EXPECT_NE(run_bench({"serve", "--launch", "--model " + model + " --cpu-workers 1 --max-seq-len 512", "--launch-bin",
                       std::string(EXL3_BIN_DIR) + "/exl3-launch", "--clients", "1", "--max-new-tokens", "4",
                       "--prompt-tokens", "8", "--stop-strings", "100000", "--stop-string-bytes", "1",
                       "--ready-timeout", "120"},
                      &err),
            0);
  EXPECT_NE(err.find("INVALID_ARGUMENT"), std::string::npos) << err;
  EXPECT_NE(err.find("stop_strings"), std::string::npos) << err;
}

// A prompt past the server's limit fails the warm-up request, which the error names, with the
// server's reason.
TEST(ServeBench, PromptOverTheServersLimitIsRefusedByName) {
  const std::string model = std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw";
  std::string err;
  EXPECT_NE(run_bench({"serve", "--launch", "--model " + model + " --cpu-workers 1 --max-seq-len 512", "--launch-bin",
                       std::string(EXL3_BIN_DIR) + "/exl3-launch", "--clients", "1", "--max-new-tokens", "4",
                       "--prompt-tokens", "100000", "--ready-timeout", "120"},
                      &err),
            0);
  EXPECT_NE(err.find("Generate (warm-up request)"), std::string::npos) << err;
  EXPECT_NE(err.find("prompt_tokens is 100000 tokens"), std::string::npos) << err;
}

TEST(SoakBench, FourClientsForTenSecondsOnTwoCpuWorkers) {
  const std::string json_path = std::string(EXL3_TEST_WORK_DIR) + "/soak_bench_test.json";
  const std::string model = std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw";
  std::string err;
  // The memory check is not the point on a 10 s run (warm-up after 2.5 s): allow any growth.
  const int rc = run_bench({"soak", "--launch", "--model " + model + " --cpu-workers 2 --max-seq-len 256",
                            "--launch-bin", std::string(EXL3_BIN_DIR) + "/exl3-launch", "--clients", "4",
                            "--duration", "10", "--sample-interval", "2", "--cancel-fraction", "0.3",
                            "--max-rss-growth", "1000", "--max-new-tokens", "32", "--ready-timeout", "120",
                            "--json", json_path},
                           &err);
  ASSERT_EQ(rc, 0) << err;
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << json_path;
  const nlohmann::json j = nlohmann::json::parse(in);
  SCOPED_TRACE(j.dump(2));
  EXPECT_EQ(j.at("mode"), "soak");
  EXPECT_EQ(j.at("other_errors"), 0);
  EXPECT_GT(j.at("requests").get<int64_t>(), 4);
  EXPECT_GT(j.at("completed").get<int64_t>(), 0);
  EXPECT_GT(j.at("tokens").get<int64_t>(), 0);
  EXPECT_TRUE(j.at("pages_ok").get<bool>());
  EXPECT_GT(j.at("total_kv_pages").get<int64_t>(), 0);
  EXPECT_EQ(j.at("free_kv_pages"), j.at("total_kv_pages"));
  // The launcher and its two workers, each with a resident size at warm-up and at the end.
  ASSERT_EQ(j.at("processes").size(), 3u);
  for (const nlohmann::json& p : j.at("processes")) {
    EXPECT_GT(p.at("warm_rss_kib").get<int64_t>(), 0);
    EXPECT_GT(p.at("end_rss_kib").get<int64_t>(), 0);
  }
  EXPECT_TRUE(j.at("passed").get<bool>());
}

TEST(SoakBench, BadFlagsFail) {
  std::string err;
  EXPECT_NE(run_bench({"soak"}, &err), 0);
  EXPECT_NE(err.find("--launch"), std::string::npos) << err;
  EXPECT_NE(run_bench({"soak", "--launch", "--model x", "--cancel-fraction", "1.5"}, &err), 0);
  EXPECT_NE(err.find("--cancel-fraction"), std::string::npos) << err;
}

TEST(ServeBench, BadFlagsFailWithMessages) {
  std::string err;
  EXPECT_NE(run_bench({"serve"}, &err), 0);
  EXPECT_NE(err.find("--server"), std::string::npos) << err;
  EXPECT_NE(run_bench({"serve", "--server", "127.0.0.1:1", "--launch", "--model x"}, &err), 0);
  EXPECT_NE(err.find("excludes"), std::string::npos) << err;
  EXPECT_NE(run_bench({"serve", "--server", "127.0.0.1:1", "--clients", "0"}, &err), 0);
  EXPECT_NE(err.find("--clients"), std::string::npos) << err;
  EXPECT_NE(run_bench({"serve", "--server", "127.0.0.1:1", "--request-timeout", "0"}, &err), 0);
  EXPECT_NE(err.find("--request-timeout: Value 0 not in range 0.001"), std::string::npos) << err;
  EXPECT_NE(run_bench({"serve", "--launch", "--model x", "--launch-bin", "/nonexistent/exl3-launch"}, &err), 0);
  EXPECT_NE(err.find("exl3-launch not found"), std::string::npos) << err;
  // Nothing listens on port 1: the first call fails fast with the address in the message.
  EXPECT_NE(run_bench({"serve", "--server", "127.0.0.1:1", "--clients", "1"}, &err), 0);
  EXPECT_NE(err.find("127.0.0.1:1"), std::string::npos) << err;
}

}  // namespace
}  // namespace exl3
