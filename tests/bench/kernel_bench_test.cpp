// exl3-bench kernels on the CPU backend with the embedded 4.0 bpw model: the JSON report has every
// op with positive times and finite rates, host-timed (the CPU backend has no step graphs), the
// attention also over a quantized cache (--cache-bits), and bad flags fail with a clear message.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/exl3_bench_cli.h"
#include "bench/bench_cli.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using testing::run_bench;

const std::string kModel = std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw";


TEST(KernelBench, CpuReportHasEveryOpWithPositiveTimes) {
  const std::string json_path = std::string(EXL3_TEST_WORK_DIR) + "/kernel_bench_test.json";
  const std::string md_path = std::string(EXL3_TEST_WORK_DIR) + "/kernel_bench_test.md";
  std::string err;
  ASSERT_EQ(run_bench({"kernels", "--model", kModel, "--backend", "cpu", "--rows", "1,3", "--iters", "2", "--json",
                       json_path, "--markdown", md_path},
                      &err),
            0)
      << err;
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << json_path;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("mode"), "kernels");
  EXPECT_EQ(j.at("backend").at("name"), "cpu");
  EXPECT_TRUE(j.at("environment").contains("hostname"));
  EXPECT_EQ(j.at("rows"), nlohmann::json({1, 3}));
  const double copy_peak = j.at("peaks").at("copy_gb_per_s").get<double>();
  EXPECT_GT(copy_peak, 0.0);
  EXPECT_TRUE(std::isfinite(copy_peak));
  EXPECT_TRUE(j.at("peaks").at("gemm_flop_per_s").is_null());  // CPU: no GEMM peak
  EXPECT_EQ(j.at("timing").at("method"), "host");                // auto: no step graphs on the CPU
  EXPECT_EQ(j.at("timing").at("iters"), 2);

  std::vector<std::string> seen;
  for (const nlohmann::json& op : j.at("ops")) {
    SCOPED_TRACE(op.dump());
    for (const char* field : {"op", "linears", "rows", "us", "min_us", "timing", "note", "bytes", "gb_per_s",
                              "flop_per_s", "copy_peak_fraction", "gemm_peak_fraction", "weights_per_ms"}) {
      EXPECT_TRUE(op.contains(field)) << field;
    }
    EXPECT_EQ(op.at("timing"), "host");
    EXPECT_TRUE(op.at("min_us").is_null());
    EXPECT_EQ(op.at("note"), "");
    EXPECT_GT(op.at("us").get<double>(), 0.0);
    EXPECT_GT(op.at("bytes").get<double>(), 0.0);
    const double gbs = op.at("gb_per_s").get<double>();
    EXPECT_TRUE(std::isfinite(gbs) && gbs > 0.0) << gbs;
    EXPECT_TRUE(std::isfinite(op.at("flop_per_s").get<double>()));
    const std::string name = op.at("op");
    if (name == "linear") {
      for (const nlohmann::json& l : op.at("linears")) seen.push_back(l.get<std::string>());
      if (op.at("exl3").get<bool>()) {
        EXPECT_GT(op.at("weights_per_ms").get<double>(), 0.0);
      }
    } else {
      seen.push_back(name);
    }
  }
  // Every linear of layer 0, the head and the other ops, once per row count.
  for (const char* expected : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head",
                               "rms_norm", "silu_mul", "rope", "attention"}) {
    EXPECT_EQ(std::count(seen.begin(), seen.end(), expected), 2) << expected;
  }
  std::ifstream md(md_path);
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("| op | rows |"), std::string::npos) << table;
  EXPECT_NE(table.find("Timing: host (mean of 2 calls"), std::string::npos) << table;
  EXPECT_NE(table.find("attention"), std::string::npos) << table;
  EXPECT_EQ(j.at("cache_bits"), "16,16");
  EXPECT_NE(table.find("cache F32 pages"), std::string::npos) << table;
}

// --cache-bits K,V: the decode attention over a quantized cache, its bytes the words and scales
// (4,3 at Llama-style shapes: 4 + 3 words and 2 scales of 2 bytes per group of 32, both sides).
TEST(KernelBench, CpuAttentionOverAQuantizedCache) {
  const std::string json_path = std::string(EXL3_TEST_WORK_DIR) + "/kernel_bench_quant_test.json";
  const std::string md_path = std::string(EXL3_TEST_WORK_DIR) + "/kernel_bench_quant_test.md";
  std::string err;
  ASSERT_EQ(run_bench({"kernels", "--model", kModel, "--backend", "cpu", "--rows", "2", "--iters", "1", "--warmup",
                       "0", "--context", "100", "--cache-bits", "4,3", "--json", json_path, "--markdown", md_path},
                      &err),
            0)
      << err;
  std::ifstream in(json_path);
  ASSERT_TRUE(in) << json_path;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("cache_bits"), "4,3");
  const nlohmann::json& model = j.at("model");
  const double token_dim = model.at("num_kv_heads").get<double>() * model.at("head_dim").get<double>();
  const double q_bytes = 2.0 * 2 * model.at("num_heads").get<double>() * model.at("head_dim").get<double>() * 4;
  int attention_ops = 0;
  for (const nlohmann::json& op : j.at("ops")) {
    if (op.at("op") != "attention") continue;
    ++attention_ops;
    EXPECT_EQ(op.at("rows"), 2);
    EXPECT_GT(op.at("us").get<double>(), 0.0);
    // 2 sequences x 100 positions x (K: groups x (4 · 4 + 2) + V: groups x (4 · 3 + 2)), plus q and out (F32).
    const double kv = 2.0 * 100 * token_dim / 32 * ((4 * 4 + 2) + (4 * 3 + 2));
    EXPECT_DOUBLE_EQ(op.at("bytes").get<double>(), kv + q_bytes) << op.dump();
  }
  EXPECT_EQ(attention_ops, 1);
  std::ifstream md(md_path);
  const std::string table((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("cache bits 4,3"), std::string::npos) << table;
}

TEST(KernelBench, BadFlagsFailWithMessages) {
  std::string err;
  EXPECT_NE(run_bench({"kernels", "--model", kModel, "--backend", "tpu"}, &err), 0);
  EXPECT_NE(err.find("--backend"), std::string::npos) << err;
  EXPECT_NE(run_bench({"kernels", "--model", kModel, "--rows", "0"}, &err), 0);
  EXPECT_NE(err.find("--rows"), std::string::npos) << err;
  EXPECT_NE(run_bench({"kernels", "--backend", "cpu"}, &err), 0);
  EXPECT_NE(err.find("--model"), std::string::npos) << err;
  EXPECT_NE(run_bench({"kernels", "--model", kModel, "--iters", "0"}, &err), 0);
  EXPECT_NE(err.find("--iters"), std::string::npos) << err;
  EXPECT_NE(run_bench({"kernels", "--model", kModel, "--timing", "fast"}, &err), 0);
  EXPECT_NE(err.find("--timing"), std::string::npos) << err;
  EXPECT_NE(run_bench({"kernels", "--model", kModel, "--repeats", "0"}, &err), 0);
  EXPECT_NE(err.find("--repeats"), std::string::npos) << err;
  for (const char* bits : {"9", "4,1", "4,x", "4,4,4"}) {
    EXPECT_NE(run_bench({"kernels", "--model", kModel, "--backend", "cpu", "--cache-bits", bits}, &err), 0) << bits;
    EXPECT_NE(err.find("--cache-bits"), std::string::npos) << bits << ": " << err;
  }
  // The CPU backend cannot capture a step graph: asking for graph timing is refused by name.
  EXPECT_NE(run_bench({"kernels", "--model", kModel, "--backend", "cpu", "--timing", "graph"}, &err), 0);
  EXPECT_NE(err.find("--timing graph"), std::string::npos) << err;
  EXPECT_NE(err.find("no step graphs"), std::string::npos) << err;
  EXPECT_NE(run_bench({"kernels", "--model", std::string(EXL3_TEST_WORK_DIR) + "/no-such-model", "--rows", "1"}, &err),
            0);
  EXPECT_NE(err.find("exl3-bench kernels: error"), std::string::npos) << err;
}

}  // namespace
}  // namespace exl3
