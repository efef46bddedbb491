// exl3-bench gemv without a device: option parsing and validation (bad flags fail before any CUDA
// call, naming the flag), the units of the derived rates, and the JSON and markdown of a report
// built by hand. In a build without CUDA the mode exists and says that it needs CUDA.
#include "bench/gemv_bench.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_cli.h"
#include "gtest/gtest.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using testing::run_bench;

TEST(GemvBench, ParsesShapes) {
  absl::StatusOr<std::vector<GemvShape>> shapes = parse_gemv_shapes({"8192x28672", "28672x8192", "128x384"});
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 3u);
  EXPECT_EQ((*shapes)[0].k, 8192);
  EXPECT_EQ((*shapes)[0].n, 28672);
  EXPECT_EQ((*shapes)[1].k, 28672);
  EXPECT_EQ((*shapes)[1].n, 8192);
  EXPECT_EQ((*shapes)[2].k, 128);
  EXPECT_EQ((*shapes)[2].n, 384);
  for (const char* bad :
       {"8192", "8192x", "x8192", "100x256", "256x100", "0x256", "-128x256", "8192x28672x2", "ax128", "2097152x128"}) {
    absl::StatusOr<std::vector<GemvShape>> s = parse_gemv_shapes({bad});
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("--shapes"), std::string::npos) << s.status();
  }
  EXPECT_FALSE(parse_gemv_shapes({}).ok());
}

TEST(GemvBench, ParsesCodebooks) {
  EXPECT_EQ(*parse_codebook_name("mul1"), Codebook::kMul1);
  EXPECT_EQ(*parse_codebook_name("mcg"), Codebook::kMcg);
  EXPECT_EQ(*parse_codebook_name("3inst"), Codebook::k3Inst);
  EXPECT_FALSE(parse_codebook_name("MCG").ok());
  for (Codebook cb : {Codebook::kMul1, Codebook::kMcg, Codebook::k3Inst}) {
    EXPECT_EQ(*parse_codebook_name(codebook_label(cb)), cb);
  }
}

TEST(GemvBench, DefaultsAreTheIssueSweep) {
  const GemvBenchOptions o;
  EXPECT_TRUE(validate_gemv_options(o).ok());
  EXPECT_EQ(o.bits, (std::vector<int>{2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(o.codebooks, (std::vector<std::string>{"mul1", "mcg", "3inst"}));
  EXPECT_EQ(o.shapes, (std::vector<std::string>{"8192x28672", "28672x8192"}));
  EXPECT_EQ(o.rows, (std::vector<int64_t>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(o.linear_bits, 4);
  EXPECT_TRUE(o.check);
}

TEST(GemvBench, ValidationNamesTheOption) {
  struct Case {
    const char* flag;
    void (*edit)(GemvBenchOptions&);
  };
  const Case cases[] = {
      {"--bits",
       [](GemvBenchOptions& o) {
         o.bits = {4, 9};
       }},
      {"--bits", [](GemvBenchOptions& o) { o.bits.clear(); }},
      {"--codebooks",
       [](GemvBenchOptions& o) {
         o.codebooks = {"mcg", "4inst"};
       }},
      {"--shapes", [](GemvBenchOptions& o) { o.shapes = {"8192x1000"}; }},
      {"--rows",
       [](GemvBenchOptions& o) {
         o.rows = {1, 0};
       }},
      {"--rows", [](GemvBenchOptions& o) { o.rows = {4097}; }},
      {"--iters", [](GemvBenchOptions& o) { o.iters = 0; }},
      {"--repeats", [](GemvBenchOptions& o) { o.repeats = 0; }},
      {"--linear-bits", [](GemvBenchOptions& o) { o.linear_bits = 9; }},
  };
  for (const Case& c : cases) {
    GemvBenchOptions o;
    c.edit(o);
    const absl::Status st = validate_gemv_options(o);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.flag << ": " << st;
    EXPECT_NE(st.message().find(c.flag), std::string::npos) << st;
  }
}

TEST(GemvBench, BadFlagsFailWithMessages) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"gemv", "--bits", "2,9"}, "--bits"},
      {{"gemv", "--codebooks", "mul1,foo"}, "--codebooks"},
      {{"gemv", "--shapes", "1000x2048"}, "--shapes"},
      {{"gemv", "--shapes", "1024by2048"}, "--shapes"},
      {{"gemv", "--rows", "0"}, "--rows"},
      {{"gemv", "--iters", "0"}, "--iters"},
      {{"gemv", "--repeats", "0"}, "--repeats"},
      {{"gemv", "--linear-bits", "12"}, "--linear-bits"},
  };
  for (const auto& [args, flag] : cases) {
    std::string err;
    EXPECT_NE(run_bench(args, &err), 0) << args[1] << " " << args[2];
    EXPECT_NE(err.find(flag), std::string::npos) << err;
  }
}

#ifndef EXL3_HAVE_CUDA
TEST(GemvBench, SaysItNeedsCuda) {
  std::string err;
  EXPECT_NE(run_bench({"gemv", "--shapes", "1024x2048", "--bits", "4"}, &err), 0);
  EXPECT_NE(err.find("needs a CUDA build"), std::string::npos) << err;
}
#endif

TEST(GemvBench, RatesUseWeightsPerMillisecond) {
  GemvTiming t;
  t.k = 8192;
  t.n = 28672;
  t.bits = 4;
  t.us = 40.0;
  // 234.9 M weights in 0.04 ms; 117.4 MB of trellis in 40 µs.
  EXPECT_NEAR(t.g_weights_per_ms(), 8192.0 * 28672.0 / 0.04 / 1e9, 1e-9);
  EXPECT_NEAR(t.g_weights_per_ms(), 5.8720256, 1e-6);
  EXPECT_NEAR(t.trellis_bytes(), 117440512.0, 1e-3);
  EXPECT_NEAR(t.trellis_gb_per_s(), 2936.0128, 1e-3);
  GemvBenchReport r;
  r.peaks.copy_gb_per_s = 4000.0;
  // 4000 GB/s at 0.5 byte per weight: 8e12 weights/s = 8 G weights/ms.
  EXPECT_NEAR(r.weight_limit_4bpw_per_ms() / 1e9, 8.0, 1e-12);
}

TEST(GemvBench, JsonAndMarkdownOfAReport) {
  GemvBenchOptions o;
  o.bits = {4};
  o.codebooks = {"mcg"};
  o.shapes = {"1024x2048"};
  o.rows = {1};
  GemvBenchReport r;
  r.device_description = "cuda:0 test device";
  r.l2_bytes = 50 << 20;
  r.peaks.copy_gb_per_s = 4000.0;
  r.peaks.copy_bytes = 1 << 30;
  GemvTiming gemm;
  gemm.kind = "gemm";
  gemm.k = 1024;
  gemm.n = 2048;
  gemm.rows = 1;
  gemm.bits = 4;
  gemm.codebook = "mcg";
  gemm.us = 2.0;
  gemm.min_us = 1.9;
  gemm.launches = 100;
  gemm.buffers = 100;
  GemvTiming linear = gemm;
  linear.kind = "linear";
  linear.us = 5.5;
  r.timings = {gemm, linear};
  GemvCheck check;
  check.k = check.n = 4096;
  check.rows = 1;
  check.bits = 4;
  check.codebook = "mcg";
  check.columns = 48;
  check.max_abs_error = 1e-4;
  check.ref_rms = 50.0;
  r.checks = {check};

  const nlohmann::json j = gemv_bench_json(o, r);
  EXPECT_EQ(j.at("mode"), "gemv");
  EXPECT_EQ(j.at("timing").at("method"), "graph");
  EXPECT_NEAR(j.at("peaks").at("weight_limit_4bpw_g_per_ms").get<double>(), 8.0, 1e-12);
  ASSERT_EQ(j.at("timings").size(), 2u);
  const nlohmann::json& g = j.at("timings")[0];
  EXPECT_EQ(g.at("kind"), "gemm");
  // 2 M weights in 2 µs: 1.048576 G weights/ms; 1 MiB in 2 µs: 524.288 GB/s.
  EXPECT_NEAR(g.at("g_weights_per_ms").get<double>(), 1.048576, 1e-9);
  EXPECT_NEAR(g.at("trellis_gb_per_s").get<double>(), 524.288, 1e-9);
  EXPECT_NEAR(g.at("copy_peak_fraction").get<double>(), 524.288 / 4000.0, 1e-12);
  EXPECT_NEAR(g.at("weight_limit_4bpw_fraction").get<double>(), 1.048576 / 8.0, 1e-12);
  EXPECT_FALSE(g.contains("transform_overhead_us"));
  const nlohmann::json& l = j.at("timings")[1];
  EXPECT_NEAR(l.at("transform_overhead_us").get<double>(), 3.5, 1e-12);
  ASSERT_EQ(j.at("checks").size(), 1u);
  EXPECT_NEAR(j.at("checks")[0].at("max_rel_error").get<double>(), 2e-6, 1e-15);
  EXPECT_TRUE(j.at("checks")[0].at("ok").get<bool>());

  const std::string md = gemv_bench_markdown(o, r);
  EXPECT_NE(md.find("| kernel | k x n | K | codebook | rows |"), std::string::npos) << md;
  EXPECT_NE(md.find("| gemm | 1024x2048 | 4 | mcg | 1 | 2.00 | 1.90 | 1.05 | 524 |"), std::string::npos) << md;
  EXPECT_NE(md.find("linear (+3.50 µs)"), std::string::npos) << md;
  EXPECT_NE(md.find("0 failed"), std::string::npos) << md;
}

// The check the gemv mode runs on the GPU's output, fed here an exact product (a · the fully
// decoded Wq, in double, rounded to fp32): it finds it within fp32 rounding, and finds a single
// wrong output in one of its strips (the last column, in the last strip).
TEST(GemvBench, ReferenceCheckFindsExactAndWrongOutputs) {
  const int64_t k = 256, n = 512, rows = 3;
  const int bits = 3;
  std::mt19937 rng(7);
  std::vector<int16_t> words(static_cast<size_t>(k / 16 * (n / 16) * 16 * bits));
  for (int16_t& w : words) w = static_cast<int16_t>(rng() & 0xFFFFu);
  const Tensor trellis = Tensor::from_vector(words, {k / 16, n / 16, 16 * bits});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> a_bits(static_cast<size_t>(rows * k));
  for (uint16_t& h : a_bits) h = float_to_half_bits(normal(rng));
  Tensor a = Tensor::zeros(DType::kF16, {rows, k});
  std::memcpy(a.mutable_raw(), a_bits.data(), a_bits.size() * sizeof(uint16_t));

  const Tensor wq = exl3_decode_ref(trellis, bits, Codebook::kMcg);  // F16 [k, n]
  const auto* w = static_cast<const uint16_t*>(wq.raw());
  Tensor c = Tensor::zeros(DType::kF32, {rows, n});
  float* out = c.mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        sum += static_cast<double>(half_bits_to_float(a_bits[static_cast<size_t>(r * k + i)])) *
               static_cast<double>(half_bits_to_float(w[i * n + j]));
      }
      out[r * n + j] = static_cast<float>(sum);
    }
  }
  GemvCheck ok = check_gemm_against_reference(trellis, bits, Codebook::kMcg, a, c, rows);
  EXPECT_EQ(ok.columns, 128);  // 8 strips of 16 out of 32
  EXPECT_EQ(ok.rows, rows);
  EXPECT_GT(ok.ref_rms, 1.0);  // sums of 256 products of ~N(0,1) values
  // Only the fp32 rounding of each output: |err| <= 2^-24 · |y|.
  EXPECT_LT(ok.max_rel_error(), 1e-6) << ok.max_abs_error << " of RMS " << ok.ref_rms;

  // A different codebook decodes other weights: far off.
  const GemvCheck other = check_gemm_against_reference(trellis, bits, Codebook::k3Inst, a, c, rows);
  EXPECT_GT(other.max_rel_error(), 0.1);

  out[1 * n + (n - 1)] += static_cast<float>(ok.ref_rms);
  const GemvCheck wrong = check_gemm_against_reference(trellis, bits, Codebook::kMcg, a, c, rows);
  EXPECT_NEAR(wrong.max_rel_error(), 1.0, 1e-3);
  EXPECT_GT(wrong.max_rel_error(), kGemvCheckTolerance);
}

}  // namespace
}  // namespace exl3
