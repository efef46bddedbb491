// exl3-bench kernels on a CUDA device with the embedded 4.0 bpw model: `--timing graph` times
// every op from step-graph replays (no host fallback) and rms_norm below `--timing host`, which
// pays the host's launch overhead per call.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "bench/bench_cli.h"
#include "common/cuda_test_util.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using testing::run_bench;

const std::string kModel = testing::source_path("models/exl3-4.0bpw");

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

class KernelBenchGpuTest : public testing::CudaTest {};

// rms_norm of rows 1 per call: graph timing leaves out the 5-9 µs host launch overhead.
TEST_F(KernelBenchGpuTest, KernelsGraphTimingBeatsHostTiming) {
  std::map<std::string, nlohmann::json> reports;
  for (const char* timing : {"graph", "host"}) {
    const std::string json_path = testing::work_path(std::string("kernel_bench_gpu_test_") + timing + ".json");
    std::string err;
    ASSERT_EQ(run_bench({"kernels", "--model", kModel, "--backend", "cuda", "--rows", "1,16", "--iters", "50",
                         "--timing", timing, "--json", json_path},
                        &err),
              0)
        << err;
    reports[timing] = read_json(json_path);
    ASSERT_FALSE(reports[timing].is_null());
    EXPECT_EQ(reports[timing].at("timing").at("method"), timing);
  }
  std::map<std::string, double> rms_norm;
  for (const auto& [timing, j] : reports) {
    for (const nlohmann::json& op : j.at("ops")) {
      SCOPED_TRACE(op.dump());
      const double us = op.at("us").get<double>();
      EXPECT_TRUE(std::isfinite(us) && us > 0.0) << us;
      if (timing == "graph") {
        // Every op of the step is capturable: no host fallback.
        EXPECT_EQ(op.at("timing"), "graph");
        EXPECT_EQ(op.at("note"), "");
        EXPECT_LE(op.at("min_us").get<double>(), us * (1.0 + 1e-9));
      } else {
        EXPECT_EQ(op.at("timing"), "host");
        EXPECT_TRUE(op.at("min_us").is_null());
      }
      if (op.at("op") == "rms_norm" && op.at("rows") == 1) rms_norm[timing] = us;
    }
  }
  ASSERT_EQ(rms_norm.size(), 2u);
  std::printf("rms_norm, 1 row: graph %.2f us, host %.2f us per call\n", rms_norm["graph"], rms_norm["host"]);
  EXPECT_LT(rms_norm["graph"], rms_norm["host"]);
}

}  // namespace
}  // namespace exl3
