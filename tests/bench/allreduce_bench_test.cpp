// exl3-bench allreduce on Gloo with two rank threads (sizes 1K and 64K, 3 iterations): the JSON has a
// row per size with positive times and busbw = algbw * 2 (n - 1) / n exactly; bad sizes, ranks 0,
// f16 on Gloo and NCCL without enough GPUs are refused with messages that name the problem.
#include "bench/allreduce_bench.h"

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


bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(AllreduceBench, ParsesSizesWithBinarySuffixes) {
  const auto sizes = parse_allreduce_sizes("1K, 16k,64K,1M,3,2G");
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(*sizes, (std::vector<int64_t>{1024, 16384, 65536, 1048576, 3, int64_t{2} << 30}));
  for (const char* bad : {"12Q", "", "1K,,2K", "0", "K", "-4", "1.5M", "99999999999999G"}) {
    const auto parsed = parse_allreduce_sizes(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
  }
  EXPECT_TRUE(has(std::string(parse_allreduce_sizes("1K,12Q").status().message()), "\"12Q\""));
}

TEST(AllreduceBench, BusFactorIsNcclTestsAllReduce) {
  EXPECT_EQ(allreduce_bus_factor(1), 0.0);
  EXPECT_EQ(allreduce_bus_factor(2), 1.0);
  EXPECT_EQ(allreduce_bus_factor(4), 1.5);
  EXPECT_EQ(allreduce_bus_factor(8), 1.75);
}

TEST(AllreduceBench, GlooTwoRanksWritesRowsWithNcclTestsBusbw) {
  const std::string json_path = std::string(EXL3_TEST_WORK_DIR) + "/allreduce_bench_test.json";
  const std::string md_path = std::string(EXL3_TEST_WORK_DIR) + "/allreduce_bench_test.md";
  std::string err;
  const int rc = run_bench({"allreduce", "--backend", "gloo", "--ranks", "2", "--sizes", "1K,64K", "--iters", "3",
                            "--warmup", "1", "--json", json_path, "--markdown", md_path},
                           &err);
  ASSERT_EQ(rc, 0) << err;
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << json_path;
  const nlohmann::json j = nlohmann::json::parse(in);
  SCOPED_TRACE(j.dump(2));
  EXPECT_EQ(j.at("mode"), "allreduce");
  EXPECT_EQ(j.at("backend"), "gloo");
  EXPECT_EQ(j.at("ranks"), 2);
  EXPECT_EQ(j.at("dtype"), "f32");
  EXPECT_EQ(j.at("iters"), 3);
  EXPECT_EQ(j.at("devices").size(), 2u);
  EXPECT_TRUE(j.at("environment").contains("host_cpu"));
  EXPECT_TRUE(has(j.at("busbw_formula").get<std::string>(), "2 * (n - 1) / n"));
  const nlohmann::json& rows = j.at("rows");
  ASSERT_EQ(rows.size(), 2u);
  const int64_t want_bytes[] = {1024, 65536};
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& r = rows.at(i);
    EXPECT_EQ(r.at("bytes").get<int64_t>(), want_bytes[i]);
    EXPECT_EQ(r.at("elements").get<int64_t>(), want_bytes[i] / 4);
    const double mean = r.at("time_us_mean").get<double>();
    const double min = r.at("time_us_min").get<double>();
    EXPECT_GT(min, 0.0);
    EXPECT_GE(mean, min);
    const double algbw = r.at("algbw_gbs").get<double>();
    EXPECT_GT(algbw, 0.0);
    // algbw = bytes / mean time in GB/s, to rounding of the printed doubles.
    EXPECT_NEAR(algbw, static_cast<double>(want_bytes[i]) / (mean * 1e-6) / 1e9, algbw * 1e-9);
    EXPECT_EQ(r.at("busbw_gbs").get<double>(), algbw * (2.0 * (2 - 1) / 2));
  }
  std::ifstream md_in(md_path);
  ASSERT_TRUE(md_in) << md_path;
  const std::string md((std::istreambuf_iterator<char>(md_in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(has(md, "| 65536 | 16384 |")) << md;
  EXPECT_TRUE(has(md, "busbw = algbw * 2 * (n - 1) / n")) << md;
}

TEST(AllreduceBench, GlooThreeRanksSumsAreCheckedAndFactorIsFourThirds) {
  AllreduceBenchOptions o;
  o.ranks = 3;
  o.sizes = "4,1028";
  o.iters = 2;
  o.warmup = 0;
  const auto report = run_allreduce_bench(o);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->rows.size(), 2u);
  for (const AllreduceRow& r : report->rows) {
    EXPECT_GT(r.min_us, 0.0);
    EXPECT_EQ(r.busbw_gbs, r.algbw_gbs * (2.0 * (3 - 1) / 3));
  }
  EXPECT_EQ(report->rows[1].elements, 257);
}

TEST(AllreduceBench, RefusesBadFlagsByName) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--sizes", "1K,12Q"}, "\"12Q\""},
      {{"--ranks", "0"}, "--ranks 0"},
      {{"--dtype", "f16"}, "gloo backend all-reduces host f32 only"},
      {{"--dtype", "f64"}, "--dtype f64"},
      {{"--backend", "mpi"}, "--backend mpi"},
      {{"--sizes", "6"}, "not a whole number of f32 elements"},
      {{"--iters", "0"}, "--iters 0"},
      {{"--timing", "graph"}, "--timing graph: needs a device backend"},
      {{"--timing", "sometimes"}, "--timing sometimes"},
      {{"--backend", "oneshot", "--oneshot-max", "1Q"}, "--oneshot-max 1Q"},
      {{"--backend", "oneshot", "--oneshot-max", "128M"}, "--oneshot-max 128M"},
      {{"--backend", "oneshot", "--ranks", "9"}, "at most 8"},
      {{"--backend", "oneshot", "--oneshot-blocks", "-1"}, "--oneshot-blocks -1"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"allreduce"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string err;
    EXPECT_EQ(run_bench(args, &err), 1) << c.args[1];
    EXPECT_TRUE(has(err, "exl3-bench allreduce: error: ")) << err;
    EXPECT_TRUE(has(err, c.message)) << "want \"" << c.message << "\" in: " << err;
  }
}

TEST(AllreduceBench, NcclWithoutEnoughGpusFailsClearly) {
  if (allreduce_bench_cuda_devices() >= 2) GTEST_SKIP() << "this machine has 2 CUDA devices: NCCL would run";
  std::string err;
  EXPECT_EQ(run_bench({"allreduce", "--backend", "nccl", "--ranks", "2", "--sizes", "1K", "--iters", "1"}, &err), 1);
  EXPECT_TRUE(has(err, "--backend nccl")) << err;
  EXPECT_TRUE(has(err, "CUDA")) << err;
  err.clear();
  EXPECT_EQ(run_bench({"allreduce", "--backend", "oneshot", "--ranks", "2", "--sizes", "1K", "--timing", "graph"}, &err),
            1);
  EXPECT_TRUE(has(err, "--backend oneshot")) << err;
  EXPECT_TRUE(has(err, "CUDA")) << err;
}

}  // namespace
}  // namespace exl3
