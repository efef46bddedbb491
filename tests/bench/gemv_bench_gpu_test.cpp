// exl3-bench gemv on a CUDA device: a small shape reports sane positive times and rates, buffers
// that rotate over twice the L2, a passing check against the CPU reference, and the whole-linear
// row with its difference to the kernel alone.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/gemv_bench.h"
#include "common/cuda_test_util.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using testing::run_bench;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

class GemvBenchGpuTest : public testing::CudaTest {};

TEST_F(GemvBenchGpuTest, GemvReportsSaneRatesAndAPassingCheck) {
  const std::string json_path = testing::work_path("gemv_bench_gpu_test.json");
  std::string err;
  ASSERT_EQ(run_bench({"gemv", "--shapes", "1024x2048", "--bits", "2,4", "--codebooks", "3inst", "--rows", "1,8",
                       "--iters", "20", "--repeats", "3", "--json", json_path},
                      &err),
            0)
      << err;
  std::printf("%s", err.c_str());  // the progress lines
  const nlohmann::json j = read_json(json_path);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("mode"), "gemv");
  EXPECT_EQ(j.at("timing").at("method"), "graph");
  const double copy = j.at("peaks").at("copy_gb_per_s").get<double>();
  EXPECT_TRUE(std::isfinite(copy) && copy > 0.0) << copy;
  EXPECT_GT(j.at("device").at("l2_bytes").get<int64_t>(), 0);

  // 2 K x 1 codebook x 2 row counts of the kernel alone, and 1 whole linear (K=4, 1 row).
  const nlohmann::json& timings = j.at("timings");
  ASSERT_EQ(timings.size(), 5u) << timings.dump(1);
  std::map<std::string, double> us;
  for (const nlohmann::json& t : timings) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(t.at("k"), 1024);
    EXPECT_EQ(t.at("n"), 2048);
    EXPECT_EQ(t.at("codebook"), "3inst");
    const double mean = t.at("us").get<double>(), min = t.at("min_us").get<double>();
    EXPECT_TRUE(std::isfinite(mean) && mean > 0.0 && mean < 10000.0) << mean;
    EXPECT_TRUE(min > 0.0 && min <= mean * (1.0 + 1e-9)) << min << " vs " << mean;
    const double gwpm = t.at("g_weights_per_ms").get<double>();
    EXPECT_NEAR(gwpm, 1024.0 * 2048.0 / (mean / 1e3) / 1e9, 1e-9 * gwpm);
    const double gbs = t.at("trellis_gb_per_s").get<double>();
    EXPECT_GT(gbs, 0.0);
    // The buffers rotate over twice the L2: no row can read its trellis much faster than HBM.
    EXPECT_LT(gbs, 2.0 * copy) << "trellis read faster than twice the copy peak: L2 reuse or a unit error";
    EXPECT_GE(t.at("trellis_buffers").get<int>(), 1);
    EXPECT_GE(t.at("launches_per_graph").get<int>(), 20);
    EXPECT_EQ(t.at("launches_per_graph").get<int>() % t.at("trellis_buffers").get<int>(), 0);
    // 1024x2048 at K=2 is 512 KiB: the rotation must cover at least twice the L2.
    EXPECT_GE(
        t.at("trellis_buffers").get<double>() * t.at("trellis_bytes").get<double>(),
        std::min(2.0 * j.at("device").at("l2_bytes").get<double>(), 1024.0 * t.at("trellis_bytes").get<double>()));
    us[t.at("kind").get<std::string>() + " K" + std::to_string(t.at("bits").get<int>()) + " m" +
       std::to_string(t.at("rows").get<int>())] = mean;
  }
  for (const char* key : {"gemm K2 m1", "gemm K2 m8", "gemm K4 m1", "gemm K4 m8", "linear K4 m1"}) {
    EXPECT_EQ(us.count(key), 1u) << key;
  }
  // The linear adds the two Hadamard transforms but may reduce its GEMV's k-slices differently from
  // launch_exl3_gemm alone (scratch instead of atomics), so only the difference is reported.
  std::printf("gemm K4 1 row %.2f us, linear K4 1 row %.2f us\n", us["gemm K4 m1"], us["linear K4 m1"]);
  EXPECT_NEAR(timings[4].at("transform_overhead_us").get<double>(), us["linear K4 m1"] - us["gemm K4 m1"], 1e-9)
      << timings[4].dump();

  // Checks on 4096x4096: every (K, codebook, rows) once, all within tolerance.
  const nlohmann::json& checks = j.at("checks");
  ASSERT_EQ(checks.size(), 4u) << checks.dump(1);
  for (const nlohmann::json& c : checks) {
    SCOPED_TRACE(c.dump());
    EXPECT_EQ(c.at("columns"), 128);  // 8 strips of 16
    EXPECT_GT(c.at("reference_rms").get<double>(), 0.0);
    EXPECT_LE(c.at("max_rel_error").get<double>(), kGemvCheckTolerance);
    EXPECT_TRUE(c.at("ok").get<bool>());
  }
}

}  // namespace
}  // namespace exl3
