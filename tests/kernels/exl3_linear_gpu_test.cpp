// GPU tests of the CUDA EXL3 GEMM and linear (kernels/cuda/exl3_gemm.cu, exl3_linear.cu):
// launch_exl3_gemm against a double-precision A · Wq with Wq from exl3_decode_ref for every K and
// codebook; launch_exl3_linear against exl3_linear_ref on random layers (odd shapes, 1..300 rows,
// partial in/out features, bias, F16/F32 output) and against ExLlamaV3's y_forward on layer 0 of
// the 4.0 bpw fixture; plus a timing printout (no assertion) for the lead.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "common/cuda_test_util.h"
#include "common/fixture_linear.h"
#include "common/exl3_gpu_layers.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_linear.cuh"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

using testing::DeviceBuffer;
using testing::DeviceLayer;
using testing::gpu_linear;
using testing::half_tensor;
using testing::HostLayer;
using testing::LinearCall;
using testing::normal_halves;
using testing::random_halves;
using testing::random_layer;

constexpr Codebook kCodebooks[] = {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1};

// GEMM vs a double-precision sum: products of fp16 are exact in fp32, so the only error is fp32
// accumulation (tensor-core partial sums, split-K atomics). Per element |err| <= kGemmAbsBound ·
// Σ|a·w| (a worst-case-style bound of a few k/16 rounding steps) and relative RMS <= kGemmRelRms.
constexpr double kGemmAbsBound = 2e-5;
constexpr double kGemmRelRms = 1e-5;
// The few-rows path (m <= 64, exl3_gemv.cu) multiplies by the codebook values before their fp16
// rounding (3INST/MCG: lo·x + hi·x; MUL1: KINV·Σh·x + KBIAS·Σx), so it may differ from the rounded
// weights by up to half an fp16 ulp of each weight: 2^-11 relative (with margin below).
constexpr double kFewRowsAbsBound = 6e-4;
constexpr double kFewRowsRelRms = 5e-4;
constexpr int64_t kFewRowsMaxM = 64;
// Linear vs exl3_linear_ref (fp32 throughout, no fp16 rounding of x ⊙ suh or of the Hadamard
// output): the GPU rounds both to fp16 as ExLlamaV3 does, and rounds F16 outputs once; expected
// relative RMS error ~4e-4. Bounds: relative RMS <= 2e-3 of the reference RMS, and every element
// within 1e-2 · RMS(reference) (≈ 5σ of the expected error plus a half-ulp fp16 output rounding).
constexpr double kLinearRelRms = 2e-3;
constexpr double kLinearMaxAbsRel = 1e-2;
// ExLlamaV3's y_forward (its own fp16 GEMM kernel) vs our GPU linear; the CPU reference reaches
// max |err| 1.2e-3 on the same data (exl3_linear_test.cpp allows 3e-3).
constexpr double kForwardTolerance = 3e-3;

class Exl3LinearGpuTest : public testing::CudaTest {};

const char* codebook_name(Codebook cb) {
  switch (cb) {
    case Codebook::k3Inst: return "3inst";
    case Codebook::kMcg: return "mcg";
    case Codebook::kMul1: return "mul1";
  }
  return "?";
}

// exl3_linear_ref on the fp16 inputs: x [rows, in_features] zero-padded to k, the first
// out_features columns of y, plus bias.
std::vector<float> reference_linear(const HostLayer& h, const std::vector<uint16_t>& x, int64_t rows,
                                    int64_t in_features, int64_t out_features, const float* bias) {
  Tensor xf = Tensor::zeros(DType::kF32, {rows, h.k});
  float* xs = xf.mutable_data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < in_features; ++i) {
      xs[r * h.k + i] = half_bits_to_float(x[static_cast<size_t>(r * in_features + i)]);
    }
  }
  const Tensor y = exl3_linear_ref(h.weight(), xf);
  std::vector<float> out(static_cast<size_t>(rows * out_features));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < out_features; ++j) {
      out[static_cast<size_t>(r * out_features + j)] =
          y.data<float>()[r * h.n + j] + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
  return out;
}

struct Comparison {
  double max_abs = 0.0;
  double rel_rms = 0.0;
  double ref_rms = 0.0;
  int64_t over_bound = 0;
};

// Compares got vs want ([rows, cols]); elements over `abs_bound` are counted and the first few
// printed with their coordinates.
Comparison compare(const std::vector<float>& got, const std::vector<float>& want, int64_t cols,
                   double abs_bound, const std::string& label) {
  Comparison c;
  EXPECT_EQ(got.size(), want.size()) << label;
  double err_sq = 0.0;
  double ref_sq = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    err_sq += err * err;
    ref_sq += double{want[i]} * want[i];
    if (!(err <= abs_bound)) {  // also catches NaN
      if (c.over_bound < 5) {
        std::printf("  %s: mismatch at row %lld col %lld: gpu %.7g ref %.7g (|err| %.3g > %.3g)\n",
                    label.c_str(), static_cast<long long>(i / cols),
                    static_cast<long long>(i % cols), got[i], want[i], err, abs_bound);
      }
      ++c.over_bound;
    }
    c.max_abs = std::max(c.max_abs, std::isnan(err) ? INFINITY : err);
  }
  const double count = static_cast<double>(std::max<size_t>(want.size(), 1));
  c.ref_rms = std::sqrt(ref_sq / count);
  c.rel_rms = std::sqrt(err_sq / count) / std::max(c.ref_rms, 1e-30);
  return c;
}

// Checks one linear call against the reference rows.
void expect_linear_close(const std::vector<float>& got, const std::vector<float>& want,
                         int64_t out_features, const std::string& label) {
  double ref_sq = 0.0;
  for (float v : want) ref_sq += double{v} * v;
  const double ref_rms = std::sqrt(ref_sq / static_cast<double>(std::max<size_t>(want.size(), 1)));
  const double abs_bound = kLinearMaxAbsRel * ref_rms;
  const Comparison c = compare(got, want, out_features, abs_bound, label);
  if (c.over_bound > 0 || c.rel_rms > kLinearRelRms) {
    std::printf("%s: max |err| %.3g (bound %.3g), rel RMS %.3g (bound %.3g), %lld over bound\n",
                label.c_str(), c.max_abs, abs_bound, c.rel_rms, kLinearRelRms,
                static_cast<long long>(c.over_bound));
  }
  EXPECT_EQ(c.over_bound, 0) << label;
  EXPECT_LE(c.rel_rms, kLinearRelRms) << label;
}

// ---- launch_exl3_gemm alone ----------------------------------------------------------------------

struct GemmCase {
  int64_t m, k, n;
};

void check_gemm(const GemmCase& g, int bits, Codebook cb, uint32_t seed) {
  const HostLayer layer = random_layer(g.k, g.n, bits, cb, seed);
  std::mt19937 rng(seed + 1);
  const std::vector<uint16_t> a = normal_halves(static_cast<size_t>(g.m * g.k), rng);

  const Tensor wq_half = exl3_decode_ref(layer.trellis_tensor(), bits, cb);
  const auto* wq_bits = static_cast<const uint16_t*>(wq_half.raw());
  std::vector<float> wq(static_cast<size_t>(g.k * g.n));
  for (size_t i = 0; i < wq.size(); ++i) wq[i] = half_bits_to_float(wq_bits[i]);
  std::vector<float> af(a.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = half_bits_to_float(a[i]);

  std::vector<double> want(static_cast<size_t>(g.m * g.n), 0.0);
  std::vector<double> magnitude(want.size(), 0.0);
  for (int64_t r = 0; r < g.m; ++r) {
    for (int64_t i = 0; i < g.k; ++i) {
      const double ai = af[static_cast<size_t>(r * g.k + i)];
      const float* wrow = wq.data() + i * g.n;
      double* out = want.data() + r * g.n;
      double* mag = magnitude.data() + r * g.n;
      for (int64_t j = 0; j < g.n; ++j) {
        const double t = ai * wrow[j];
        out[j] += t;
        mag[j] += std::fabs(t);
      }
    }
  }

  DeviceBuffer<__half> d_a(a.size());
  d_a.upload(a.data(), a.size());
  DeviceLayer d_layer(layer);
  DeviceBuffer<float> d_c(want.size());
  Exl3GemmParams p;
  p.a = d_a.get();
  p.trellis = d_layer.trellis.get();
  p.c = d_c.get();
  p.m = g.m;
  p.k = g.k;
  p.n = g.n;
  p.bits = bits;
  p.codebook = cb;
  launch_exl3_gemm(p, nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(want.size());
  d_c.download(got.data(), got.size());

  const std::string label = "gemm m=" + std::to_string(g.m) + " k=" + std::to_string(g.k) +
                            " n=" + std::to_string(g.n) + " bits=" + std::to_string(bits) + " " +
                            codebook_name(cb);
  double err_sq = 0.0;
  double ref_sq = 0.0;
  double max_abs = 0.0;
  int64_t over = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const double bound = (g.m <= kFewRowsMaxM ? kFewRowsAbsBound : kGemmAbsBound) * magnitude[i] + 1e-30;
    err_sq += err * err;
    ref_sq += want[i] * want[i];
    max_abs = std::max(max_abs, std::isnan(err) ? INFINITY : err);
    if (!(err <= bound)) {
      if (over < 5) {
        std::printf("  %s: mismatch at row %lld col %lld: gpu %.8g ref %.8g (|err| %.3g > %.3g)\n",
                    label.c_str(), static_cast<long long>(i / g.n),
                    static_cast<long long>(i % g.n), got[i], want[i], err, bound);
      }
      ++over;
    }
  }
  const double rel_rms = std::sqrt(err_sq / std::max(ref_sq, 1e-300));
  const double rel_rms_bound = g.m <= kFewRowsMaxM ? kFewRowsRelRms : kGemmRelRms;
  if (over > 0 || rel_rms > rel_rms_bound) {
    std::printf("%s: max |err| %.3g, rel RMS %.3g, %lld elements over bound\n", label.c_str(),
                max_abs, rel_rms, static_cast<long long>(over));
  }
  EXPECT_EQ(over, 0) << label;
  EXPECT_LE(rel_rms, rel_rms_bound) << label;
}

TEST_F(Exl3LinearGpuTest, GemmMatchesDecodedWeightForEveryBitsAndCodebook) {
  uint32_t seed = 100;
  for (int bits = 1; bits <= 8; ++bits) {
    for (Codebook cb : kCodebooks) {
      for (int64_t m : {1, 2, 3, 4, 5, 16, 17, 150}) check_gemm({m, 256, 384}, bits, cb, seed++);
    }
  }
}

TEST_F(Exl3LinearGpuTest, GemmMatchesDecodedWeightOnDeepSplitsAndPrefill) {
  // k = 4096 with few columns: many k-slices added atomically; m = 2048 on 16 row passes.
  check_gemm({1, 4096, 128}, 4, Codebook::kMul1, 7);
  check_gemm({40, 4096, 256}, 5, Codebook::k3Inst, 8);
  check_gemm({2048, 512, 1024}, 3, Codebook::kMcg, 9);
  check_gemm({300, 128, 128}, 8, Codebook::kMul1, 10);
}

// ---- launch_exl3_linear ----------------------------------------------------------------------------

// Runs every row count of `row_counts` through the GPU linear and compares each with one stacked
// reference computation. Output dtype and bias alternate over the row counts.
void check_linear_rows(const HostLayer& layer, int64_t in_features, int64_t out_features,
                       const std::vector<int64_t>& row_counts, uint32_t seed,
                       const std::string& name) {
  int64_t total = 0;
  for (int64_t m : row_counts) total += m;
  std::mt19937 rng(seed);
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(total * in_features), rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> bias(static_cast<size_t>(out_features));
  for (float& b : bias) b = dist(rng);

  const std::vector<float> ref_plain =
      reference_linear(layer, x, total, in_features, out_features, nullptr);
  const DeviceLayer d_layer(layer);
  int64_t offset = 0;
  for (size_t i = 0; i < row_counts.size(); ++i) {
    const int64_t m = row_counts[i];
    LinearCall call;
    call.m = m;
    call.in_features = in_features;
    call.out_features = out_features;
    call.x = x.data() + offset * in_features;
    call.y_f32 = i % 2 == 0;
    call.bias = i % 3 != 1 ? bias.data() : nullptr;
    // Every other call gives the few-rows path room for its k-slices (partials summed by the
    // output transform) and its prestaged A (launch_gemv_stage); the others leave only [m, n] and
    // [m, k] (input transform + atomics, or blocks staging their own slices of A).
    call.scratch_rows = i % 4 < 2 ? 2048 : 0;
    const std::vector<float> got = gpu_linear(layer, d_layer, call);

    std::vector<float> want(ref_plain.begin() + offset * out_features,
                            ref_plain.begin() + (offset + m) * out_features);
    if (call.bias != nullptr) {
      for (size_t e = 0; e < want.size(); ++e) want[e] += bias[e % static_cast<size_t>(out_features)];
    }
    const std::string label = name + " m=" + std::to_string(m) + (call.y_f32 ? " F32" : " F16") +
                              (call.bias != nullptr ? " bias" : "") + (call.scratch_rows > 0 ? " slices" : "");
    expect_linear_close(got, want, out_features, label);
    offset += m;
  }
}

TEST_F(Exl3LinearGpuTest, LinearMatchesReferenceAcrossShapesAndRowCounts) {
  struct LayerShape {
    int64_t k, n;
    int bits;
    Codebook cb;
  };
  const LayerShape shapes[] = {{128, 128, 2, Codebook::k3Inst},
                          {256, 384, 3, Codebook::kMcg},
                          {640, 128, 5, Codebook::kMul1},
                          {1536, 512, 4, Codebook::kMul1},
                          {4096, 1024, 4, Codebook::k3Inst}};
  const std::vector<int64_t> rows = {1, 2, 3, 6, 7, 8, 9, 16, 17, 33, 1, 50, 64, 65, 129, 300};
  uint32_t seed = 1000;
  for (const LayerShape& s : shapes) {
    const HostLayer layer = random_layer(s.k, s.n, s.bits, s.cb, seed++);
    const std::string name = "linear k=" + std::to_string(s.k) + " n=" + std::to_string(s.n) +
                             " bits=" + std::to_string(s.bits) + " " + codebook_name(s.cb);
    check_linear_rows(layer, s.k, s.n, rows, seed++, name);
  }
}

TEST_F(Exl3LinearGpuTest, LinearMatchesReferenceForEveryBitsAndCodebook) {
  uint32_t seed = 2000;
  for (int bits = 1; bits <= 8; ++bits) {
    for (Codebook cb : kCodebooks) {
      const HostLayer layer = random_layer(256, 384, bits, cb, seed++);
      const std::string name = "linear bits=" + std::to_string(bits) + " " + codebook_name(cb);
      check_linear_rows(layer, 256, 384, {1, 16, 33, 2, 64, 1}, seed++, name);
    }
  }
}

// The few-rows path with room for its k-slices gives the same bits run to run (MUL1's row sums:
// each 128-input block's sum kept and added in block order, whether a block stages its own slice of
// A, scratch_a holding only [m, k], or copies the prestaged one from 6 rows): five runs of each
// call, bit for bit.
TEST_F(Exl3LinearGpuTest, FewRowsLinearGivesTheSameBitsRunToRun) {
  const HostLayer layer = random_layer(4096, 1024, 4, Codebook::kMul1, 2500);
  const DeviceLayer d_layer(layer);
  std::mt19937 rng(2501);
  for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{17}, int64_t{32}}) {
    const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(m * 4096), rng);
    for (const bool prestaged : {false, true}) {
      LinearCall call;
      call.m = m;
      call.in_features = 4096;
      call.out_features = 1024;
      call.x = x.data();
      call.y_f32 = true;
      call.scratch_rows = 2048;
      call.scratch_a_rows = prestaged ? 0 : m;
      const std::vector<float> first = gpu_linear(layer, d_layer, call);
      for (int run = 1; run < 5; ++run) {
        const std::vector<float> again = gpu_linear(layer, d_layer, call);
        ASSERT_EQ(again.size(), first.size());
        EXPECT_EQ(std::memcmp(again.data(), first.data(), first.size() * sizeof(float)), 0)
            << "m " << m << (prestaged ? " prestaged" : " own slices") << ", run " << run;
      }
    }
  }
}

TEST_F(Exl3LinearGpuTest, LinearWithFewerFeaturesThanPadded) {
  // in_features 600 of k = 640 (x rows of odd stride), out_features 333 of n = 384.
  const HostLayer layer = random_layer(640, 384, 3, Codebook::kMcg, 3000);
  check_linear_rows(layer, 600, 333, {1, 7, 40, 2, 129, 3}, 3001, "linear partial features");
  const HostLayer single = random_layer(128, 256, 6, Codebook::k3Inst, 3002);
  check_linear_rows(single, 1, 129, {1, 5, 18}, 3003, "linear in=1 out=129");
}

// ---- ExLlamaV3 fixture ---------------------------------------------------------------------------

class Exl3LinearFixtureTest : public Exl3LinearGpuTest,
                              public ::testing::WithParamInterface<std::string> {};

TEST_P(Exl3LinearFixtureTest, MatchesExllamaForward) {
  testing::FixtureLinear f;
  ASSERT_NO_FATAL_FAILURE(testing::load_fixture_linear(GetParam(), {"x", "y_forward"}, f));
  const Tensor* trellis = &f.weight.trellis;
  const Tensor* suh = &f.weight.suh;
  const Tensor* svh = &f.weight.svh;
  const Tensor* x = &f.dump["x"];
  const Tensor* y_forward = &f.dump["y_forward"];

  HostLayer layer;
  layer.k = trellis->dim(0) * 16;
  layer.n = trellis->dim(1) * 16;
  layer.bits = static_cast<int>(trellis->dim(2) / 16);
  layer.codebook = Codebook::kMul1;
  const auto* words = static_cast<const int16_t*>(trellis->raw());
  layer.trellis.assign(words, words + trellis->numel());
  const auto* suh_bits = static_cast<const uint16_t*>(suh->raw());
  const auto* svh_bits = static_cast<const uint16_t*>(svh->raw());
  layer.suh.assign(suh_bits, suh_bits + suh->numel());
  layer.svh.assign(svh_bits, svh_bits + svh->numel());
  ASSERT_EQ(x->dim(1), layer.k);
  ASSERT_EQ(y_forward->dim(1), layer.n);

  const int64_t m = x->dim(0);
  std::vector<uint16_t> x_half(static_cast<size_t>(x->numel()));
  int64_t inexact = 0;
  for (size_t i = 0; i < x_half.size(); ++i) {
    const float v = x->data<float>()[i];
    x_half[i] = float_to_half_bits(v);
    inexact += half_bits_to_float(x_half[i]) != v;
  }
  std::printf("%s: %lld of %zu x values not exact in fp16\n", GetParam().c_str(),
              static_cast<long long>(inexact), x_half.size());

  const DeviceLayer d_layer(layer);
  LinearCall call;
  call.m = m;
  call.in_features = layer.k;
  call.out_features = layer.n;
  call.x = x_half.data();
  call.y_f32 = true;
  const std::vector<float> got = gpu_linear(layer, d_layer, call);

  const std::vector<float> want(y_forward->data<float>(),
                                y_forward->data<float>() + y_forward->numel());
  const Comparison c = compare(got, want, layer.n, kForwardTolerance, GetParam() + " vs y_forward");
  std::printf("%s: max |y_gpu - y_forward| = %.3g (bound %.3g), rel RMS %.3g, RMS(y) %.3g\n",
              GetParam().c_str(), c.max_abs, kForwardTolerance, c.rel_rms, c.ref_rms);
  EXPECT_EQ(c.over_bound, 0);

  const std::vector<float> cpu = reference_linear(layer, x_half, m, layer.k, layer.n, nullptr);
  expect_linear_close(got, cpu, layer.n, GetParam() + " vs exl3_linear_ref");
}

INSTANTIATE_TEST_SUITE_P(Layer0, Exl3LinearFixtureTest,
                         ::testing::Values("self_attn.q_proj", "mlp.down_proj"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "self_attn.q_proj" ? std::string("QProj")
                                                                   : std::string("DownProj");
                         });

// ---- Timing (printout only) ------------------------------------------------------------------------

TEST_F(Exl3LinearGpuTest, TimingPrintout) {
  constexpr int64_t kK = 4096;
  constexpr int64_t kN = 4096;
  constexpr int kWarmup = 5;
  constexpr int kIters = 100;
  for (Codebook cb : {Codebook::k3Inst, Codebook::kMul1}) {
    const HostLayer layer = random_layer(kK, kN, 4, cb, 4000);
    const DeviceLayer d_layer(layer);
    for (int64_t m : {1, 16, 2048}) {
      std::mt19937 rng(4001);
      const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(m * kK), rng);
      DeviceBuffer<__half> d_x(x.size());
      d_x.upload(x.data(), x.size());
      DeviceBuffer<__half> scratch_a(static_cast<size_t>(m * kK));
      DeviceBuffer<float> scratch_c(static_cast<size_t>(m * kN));
      DeviceBuffer<__half> y(static_cast<size_t>(m * kN));

      Exl3GemmParams g;
      g.a = d_x.get();
      g.trellis = d_layer.trellis.get();
      g.c = scratch_c.get();
      g.m = m;
      g.k = kK;
      g.n = kN;
      g.bits = layer.bits;
      g.codebook = cb;
      Exl3LinearParams p;
      p.x = d_x.get();
      p.m = m;
      p.in_features = kK;
      p.out_features = kN;
      p.trellis = d_layer.trellis.get();
      p.suh = d_layer.suh.get();
      p.svh = d_layer.svh.get();
      p.k = kK;
      p.n = kN;
      p.bits = layer.bits;
      p.codebook = cb;
      p.y = y.get();
      p.scratch_a = scratch_a.get();
      p.scratch_c = scratch_c.get();

      cudaEvent_t start;
      cudaEvent_t stop;
      EXL3_CUDA_CHECK(cudaEventCreate(&start));
      EXL3_CUDA_CHECK(cudaEventCreate(&stop));
      float ms[2] = {0.0f, 0.0f};
      for (int which = 0; which < 2; ++which) {
        const auto run = [&] {
          if (which == 0) {
            launch_exl3_gemm(g, nullptr);
          } else {
            launch_exl3_linear(p, nullptr);
          }
        };
        for (int i = 0; i < kWarmup; ++i) run();
        EXL3_CUDA_CHECK(cudaEventRecord(start, nullptr));
        for (int i = 0; i < kIters; ++i) run();
        EXL3_CUDA_CHECK(cudaEventRecord(stop, nullptr));
        EXL3_CUDA_CHECK(cudaEventSynchronize(stop));
        EXL3_CUDA_CHECK(cudaEventElapsedTime(&ms[which], start, stop));
        ms[which] /= kIters;
      }
      EXL3_CUDA_CHECK(cudaEventDestroy(start));
      EXL3_CUDA_CHECK(cudaEventDestroy(stop));
      const double trellis_bytes = static_cast<double>(kK * kN * layer.bits / 8);
      const double weights = static_cast<double>(kK * kN);
      std::printf(
          "timing %s K=4 m=%lld k=%lld n=%lld: gemm %.1f us (%.0f GB/s of trellis, %.2f G weights/ms, "
          "%.1f TFLOP/s), linear %.1f us\n",
          codebook_name(cb), static_cast<long long>(m), static_cast<long long>(kK),
          static_cast<long long>(kN), ms[0] * 1e3, trellis_bytes / (ms[0] * 1e-3) / 1e9,
          weights / ms[0] / 1e9, 2.0 * weights * m / (ms[0] * 1e-3) / 1e12, ms[1] * 1e3);
    }
  }
  EXL3_CUDA_CHECK(cudaGetLastError());
}

// Diagnostic sweep (run with --gtest_also_run_disabled_tests): the few-rows path on a 70B-sized
// matrix (k 8192, n 28672) for every K and codebook, bare GEMM and whole linear, timed as 50
// back-to-back launches inside one CUDA graph (device time without host launch costs). Prints
// one line per case; asserts only that nothing failed.
TEST_F(Exl3LinearGpuTest, DISABLED_TimingSweep70B) {
  constexpr int64_t kK = 8192;
  constexpr int64_t kN = 28672;
  constexpr int kLaunches = 50;
  constexpr int kReplays = 5;
  // One buffer of random words serves every K (any bit pattern is a valid trellis).
  const std::vector<int16_t> words =
      testing::random_trellis_words(static_cast<size_t>(kK / 16 * (kN / 16) * 16 * 8), 12345u);
  DeviceBuffer<int16_t> trellis(words.size());
  trellis.upload(words.data(), words.size());
  std::mt19937 rng(77);
  const std::vector<uint16_t> suh = random_halves(static_cast<size_t>(kK), 0.5f, 1.5f, true, rng);
  const std::vector<uint16_t> svh = random_halves(static_cast<size_t>(kN), 0.5f, 1.5f, true, rng);
  DeviceBuffer<__half> d_suh(suh.size()), d_svh(svh.size());
  d_suh.upload(suh.data(), suh.size());
  d_svh.upload(svh.data(), svh.size());
  constexpr int64_t kMaxM = 32;
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(kMaxM * kK), rng);
  DeviceBuffer<__half> d_x(x.size());
  d_x.upload(x.data(), x.size());
  constexpr int64_t kScratchRows = 512;
  DeviceBuffer<float> scratch_c(static_cast<size_t>(kScratchRows * kN));
  DeviceBuffer<__half> scratch_a(static_cast<size_t>(kMaxM * kK));
  DeviceBuffer<__half> y(static_cast<size_t>(kMaxM * kN));
  cudaStream_t stream = nullptr;
  EXL3_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  EXL3_CUDA_CHECK(cudaEventCreate(&start));
  EXL3_CUDA_CHECK(cudaEventCreate(&stop));
  const auto graph_us = [&](const std::function<void()>& launch) {
    launch();  // first use outside the capture (lazy module loading)
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXL3_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) launch();
    EXL3_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    EXL3_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    EXL3_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    EXL3_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kReplays; ++i) EXL3_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    EXL3_CUDA_CHECK(cudaEventRecord(stop, stream));
    EXL3_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    EXL3_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    EXL3_CUDA_CHECK(cudaGraphExecDestroy(exec));
    EXL3_CUDA_CHECK(cudaGraphDestroy(graph));
    return 1e3 * ms / (kLaunches * kReplays);
  };
  for (Codebook cb : kCodebooks) {
    for (int bits = 2; bits <= 8; ++bits) {
      for (int64_t m : {1, 4, 16, 32}) {
        Exl3GemmParams g;
        g.a = d_x.get();
        g.trellis = trellis.get();
        g.c = scratch_c.get();
        g.m = m;
        g.k = kK;
        g.n = kN;
        g.bits = bits;
        g.codebook = cb;
        Exl3LinearParams p;
        p.x = d_x.get();
        p.m = m;
        p.in_features = kK;
        p.out_features = kN;
        p.trellis = trellis.get();
        p.suh = d_suh.get();
        p.svh = d_svh.get();
        p.k = kK;
        p.n = kN;
        p.bits = bits;
        p.codebook = cb;
        p.y = y.get();
        p.scratch_a = scratch_a.get();
        p.scratch_c = scratch_c.get();
        p.scratch_c_floats = kScratchRows * kN;
        const double gemm = graph_us([&] { launch_exl3_gemm(g, stream); });
        const double linear = graph_us([&] { launch_exl3_linear(p, stream); });
        const double weights = static_cast<double>(kK * kN);
        std::printf("sweep %s K=%d m=%lld: gemm %.1f us %.2f G weights/ms %.0f GB/s | linear %.1f us %.2f G weights/ms\n",
                    codebook_name(cb), bits, static_cast<long long>(m), gemm, weights / gemm / 1e6,
                    weights * bits / 8 / gemm / 1e3, linear, weights / linear / 1e6);
      }
    }
  }
  EXL3_CUDA_CHECK(cudaEventDestroy(start));
  EXL3_CUDA_CHECK(cudaEventDestroy(stop));
  EXL3_CUDA_CHECK(cudaStreamDestroy(stream));
  EXL3_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace exl3
