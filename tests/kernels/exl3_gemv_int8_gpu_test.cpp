// GPU tests of the int8-activation EXL3 matmul (kernels/cuda/exl3_gemv_int8.cu) against its
// reference exl3_gemv_int8_ref (kernels/ref/int8_activations_ref.h): the whole linear with
// Exl3LinearParams::int8_activations on, for every K, 1..32 rows, padded features, bias, grouped
// launches, the fused RMSNorm, non-finite inputs and too little scratch; plus how far int8
// activations move the output from the fp16 path.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/exl3_gpu_layers.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_linear.cuh"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "kernels/ref/int8_activations_ref.h"

namespace exl3 {
namespace {

using testing::DeviceBuffer;
using testing::DeviceLayer;
using testing::gpu_linear;
using testing::HostLayer;
using testing::LinearCall;
using testing::normal_halves;
using testing::random_layer;

// The kernel's integer sums are exact; what differs from the double reference is fp32 rounding of
// the scales (scale·KINV, scale·Σq), the fp32 sums of at most 8 blocks per slice, of the slices and
// of the row bias, and the output Hadamard in fp32: a few 1e-7 relative each, with a cancellation
// of ~3.5x between the Σ t·q and Σ q terms. Bounds: relative RMS <= 1e-5 and every element within
// 1e-4 · RMS(reference).
constexpr double kRelRms = 1e-5;
constexpr double kMaxAbsRel = 1e-4;
// int8 vs fp16 activations on N(0, 1) inputs: a block's step is amax / 127 (amax ~3σ of the
// transformed input), so the expected relative RMS deviation is ~3 / 127 / sqrt(12) ≈ 0.7%.
constexpr double kInt8DeviationMax = 0.015;
constexpr double kInt8DeviationMin = 0.001;  // below this the int8 path cannot have run

class Exl3GemvInt8GpuTest : public testing::CudaTest {};

// The linear's transformed input a (F32 [m, k]) as the GPU computes it: x ⊙ suh, Hadamard,
// ×1/sqrt(128), fp16 — the values the GEMV kernels stage (launch_exl3_input_transform).
Tensor gpu_transformed_input(const HostLayer& h, const DeviceLayer& d, const std::vector<uint16_t>& x, int64_t m,
                             int64_t in_features) {
  DeviceBuffer<__half> dx(x.size());
  dx.upload(x.data(), x.size());
  DeviceBuffer<__half> a(static_cast<size_t>(m * h.k));
  DeviceBuffer<float> unused(1);  // the transform checks every pointer of the params
  Exl3LinearParams p;
  p.x = dx.get();
  p.m = m;
  p.in_features = in_features;
  p.out_features = h.n;
  p.trellis = d.trellis.get();
  p.suh = d.suh.get();
  p.svh = d.svh.get();
  p.k = h.k;
  p.n = h.n;
  p.bits = h.bits;
  p.codebook = h.codebook;
  p.scratch_a = a.get();
  p.scratch_c = unused.get();
  p.y = unused.get();
  launch_exl3_input_transform(p, nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__half> halves = a.download(static_cast<size_t>(m * h.k));
  Tensor out = Tensor::zeros(DType::kF32, {m, h.k});
  for (size_t i = 0; i < halves.size(); ++i) out.mutable_data<float>()[i] = __half2float(halves[i]);
  return out;
}

// y = had128(exl3_gemv_int8_ref(a)) ⊙ svh + bias, the first out_features columns.
std::vector<float> reference_int8_linear(const HostLayer& h, const Tensor& a, int64_t out_features,
                                         const std::vector<float>& bias) {
  const int64_t m = a.dim(0);
  const std::vector<double> c = exl3_gemv_int8_ref(h.trellis_tensor(), h.bits, a);
  std::vector<float> rows(c.begin(), c.end());
  hadamard128_ref(rows.data(), m, h.n);
  std::vector<float> y(static_cast<size_t>(m * out_features));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < out_features; ++j) {
      y[static_cast<size_t>(r * out_features + j)] =
          rows[static_cast<size_t>(r * h.n + j)] * half_bits_to_float(h.svh[static_cast<size_t>(j)]) +
          (bias.empty() ? 0.0f : bias[static_cast<size_t>(j)]);
    }
  }
  return y;
}

struct Deviation {
  double rel_rms = 0.0;
  double max_abs = 0.0;
  double ref_rms = 0.0;
  int64_t worst = -1;
};

Deviation compare(std::span<const float> got, std::span<const float> want) {
  Deviation d;
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    err2 += e * e;
    ref2 += static_cast<double>(want[i]) * want[i];
    if (!(std::fabs(e) <= d.max_abs)) {
      d.max_abs = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::fabs(e);
      d.worst = static_cast<int64_t>(i);
    }
  }
  d.ref_rms = std::sqrt(ref2 / static_cast<double>(want.size()));
  d.rel_rms = std::sqrt(err2 / std::max(ref2, 1e-30));
  return d;
}

// A call with int8 activations and an F32 output of x (fp16 bits [m, in_features]); scratch_c
// holds scratch_rows rows of n floats.
LinearCall int8_call(int64_t m, int64_t in_features, int64_t out_features, const std::vector<uint16_t>& x,
                     int64_t scratch_rows) {
  LinearCall call;
  call.m = m;
  call.in_features = in_features;
  call.out_features = out_features;
  call.x = x.data();
  call.y_f32 = true;
  call.scratch_rows = scratch_rows;
  call.int8_activations = true;
  return call;
}

struct Case {
  int64_t k, n, in_features, out_features, m;
  int bits;
  bool bias;
};

void check_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "K=" << c.bits << " k=" << c.k << " n=" << c.n << " in=" << c.in_features
                                    << " out=" << c.out_features << " m=" << c.m << " bias=" << c.bias);
  const HostLayer h = random_layer(c.k, c.n, c.bits, Codebook::kMul1, seed);
  const DeviceLayer d(h);
  std::mt19937 rng(seed + 1);
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(c.m * c.in_features), rng);
  std::vector<float> bias;
  if (c.bias) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t j = 0; j < c.out_features; ++j) bias.push_back(dist(rng));
  }
  LinearCall call = int8_call(c.m, c.in_features, c.out_features, x, 64 * c.m);
  call.bias = c.bias ? bias.data() : nullptr;
  const std::vector<float> got = gpu_linear(h, d, call);
  const Tensor a = gpu_transformed_input(h, d, x, c.m, c.in_features);
  const std::vector<float> want = reference_int8_linear(h, a, c.out_features, bias);
  const Deviation dev = compare(got, want);
  EXPECT_LE(dev.rel_rms, kRelRms) << "relative RMS error vs exl3_gemv_int8_ref";
  EXPECT_LE(dev.max_abs, kMaxAbsRel * dev.ref_rms)
      << "worst element " << dev.worst << " (row " << dev.worst / c.out_features << ", column "
      << dev.worst % c.out_features << "): got " << got[static_cast<size_t>(dev.worst)] << ", want "
      << want[static_cast<size_t>(dev.worst)];

  // The same linear with fp16 activations: the int8 path ran, and moved the output by about the
  // activation rounding.
  call.int8_activations = false;
  const std::vector<float> fp16 = gpu_linear(h, d, call);
  const Deviation moved = compare(got, fp16);
  EXPECT_LE(moved.rel_rms, kInt8DeviationMax) << "int8 vs fp16 activations";
  EXPECT_GE(moved.rel_rms, kInt8DeviationMin) << "int8 vs fp16 activations: identical, so int8 did not run";
}

TEST_F(Exl3GemvInt8GpuTest, LinearMatchesReferenceForEveryBitsAndRowCount) {
  uint32_t seed = 100;
  for (int bits = 1; bits <= 8; ++bits) {
    for (const int64_t m : {1, 2, 5, 8, 9, 32}) {
      check_case({512, 384, 512, 384, m, bits, false}, seed++);
    }
  }
}

TEST_F(Exl3GemvInt8GpuTest, LinearMatchesReferenceOnLargeAndPaddedShapes) {
  check_case({4096, 1024, 4096, 1024, 1, 4, false}, 7);
  check_case({4096, 1024, 4096, 1024, 17, 4, true}, 8);
  check_case({1024, 640, 1000, 600, 3, 4, true}, 9);
  check_case({1152, 256, 1100, 256, 24, 6, true}, 10);
  check_case({14336, 512, 14336, 512, 1, 4, false}, 11);
  // One and two rows stream two quantization blocks per stage where k is a multiple of 256 inputs,
  // one block per stage where it is not (72 k-tiles here).
  check_case({1152, 256, 1100, 256, 1, 4, true}, 12);
  check_case({1152, 256, 1152, 256, 2, 6, false}, 13);
  check_case({2048, 512, 2048, 512, 2, 6, false}, 14);
}

// From kInt8PrestageMinRows rows, with room in scratch_a (4 bytes an input a row), q is quantized
// once for the whole k ahead of the matmul (launch_gemv_stage_int8) instead of by every block for
// its slice: the same quantization, the same launch plan and the same sums in the same order, so
// the same bits.
TEST_F(Exl3GemvInt8GpuTest, PrestagedInputMatchesBlockStaging) {
  for (const int64_t m : {int64_t{5}, int64_t{8}, int64_t{9}, int64_t{24}, int64_t{32}}) {
    SCOPED_TRACE(::testing::Message() << m << " rows");
    constexpr int64_t kK = 2048, kN = 512;
    const HostLayer h = random_layer(kK, kN, 4, Codebook::kMul1, 70 + static_cast<uint32_t>(m));
    const DeviceLayer d(h);
    std::mt19937 rng(80 + static_cast<uint32_t>(m));
    const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(m * kK), rng);
    LinearCall call = int8_call(m, kK, kN, x, 64 * m);
    const std::vector<float> prestaged = gpu_linear(h, d, call);
    call.scratch_a_rows = m;  // m·k halves: no room for q
    const std::vector<float> staged_by_blocks = gpu_linear(h, d, call);
    ASSERT_EQ(prestaged.size(), staged_by_blocks.size());
    int64_t differ = 0;
    for (size_t i = 0; i < prestaged.size(); ++i) {
      differ += std::memcmp(&prestaged[i], &staged_by_blocks[i], sizeof(float)) != 0 ? 1 : 0;
    }
    EXPECT_EQ(differ, 0) << "of " << prestaged.size() << " outputs";
    // And both are the int8 linear (not a fallback): within the reference's bounds.
    const std::vector<float> want = reference_int8_linear(h, gpu_transformed_input(h, d, x, m, kK), kN, {});
    EXPECT_LE(compare(prestaged, want).rel_rms, kRelRms);
  }
}

// Three linears of one x in one launch (blocks shared out between the problems) give each linear's
// reference.
TEST_F(Exl3GemvInt8GpuTest, GroupedLinearsMatchTheirReferences) {
  constexpr int64_t kM = 6, kK = 1024;
  const std::array<int64_t, 3> widths = {1024, 256, 384};
  std::mt19937 rng(21);
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(kM * kK), rng);
  DeviceBuffer<__half> dx(x.size());
  dx.upload(x.data(), x.size());
  std::vector<HostLayer> hosts;
  for (size_t i = 0; i < widths.size(); ++i) hosts.push_back(random_layer(kK, widths[i], 4, Codebook::kMul1, 30 + i));
  std::vector<std::unique_ptr<DeviceLayer>> devices;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> ys;
  std::array<Exl3LinearParams, 3> ps;
  for (size_t i = 0; i < widths.size(); ++i) {
    devices.push_back(std::make_unique<DeviceLayer>(hosts[i]));
    ys.push_back(std::make_unique<DeviceBuffer<float>>(static_cast<size_t>(kM * widths[i])));
    Exl3LinearParams& p = ps[i];
    p.x = dx.get();
    p.m = kM;
    p.in_features = kK;
    p.out_features = widths[i];
    p.trellis = devices[i]->trellis.get();
    p.suh = devices[i]->suh.get();
    p.svh = devices[i]->svh.get();
    p.k = kK;
    p.n = widths[i];
    p.bits = 4;
    p.codebook = Codebook::kMul1;
    p.y = ys[i]->get();
    p.y_f32 = true;
    p.int8_activations = true;
  }
  const int64_t scratch_floats = 64 * kM * (widths[0] + widths[1] + widths[2]);
  DeviceBuffer<float> scratch(static_cast<size_t>(scratch_floats));
  ASSERT_TRUE(exl3_gemv_linears_fit(ps, scratch_floats));
  launch_exl3_gemv_linears(ps, scratch.get(), scratch_floats, GemvEpilogue::kStore, device_sm_count(), nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  for (size_t i = 0; i < widths.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "linear " << i);
    // Every linear has its own suh, so its own transformed input.
    const Tensor a = gpu_transformed_input(hosts[i], *devices[i], x, kM, kK);
    const std::vector<float> want = reference_int8_linear(hosts[i], a, widths[i], {});
    const std::vector<float> got = ys[i]->download(static_cast<size_t>(kM * widths[i]));
    const Deviation dev = compare(got, want);
    EXPECT_LE(dev.rel_rms, kRelRms);
    EXPECT_LE(dev.max_abs, kMaxAbsRel * dev.ref_rms) << "worst element " << dev.worst;
  }
}

// The fused RMSNorm (Exl3LinearParams::norm_x, up to kGemvNormMaxRows rows) gives the int8
// linear of fp16(rms_norm(x)) as the separate RMSNorm would write it. The matmul sums the squares
// in its own order, so a normalized input may differ by an fp16 ulp, and its int8 code by one:
// relative RMS <= 1e-3 (a wrong norm moves the output by far more).
TEST_F(Exl3GemvInt8GpuTest, FusedRmsNormMatchesTheNormThenTheLinear) {
  constexpr int64_t kK = 2048, kN = 512;
  constexpr float kEps = 1e-5f;
  const HostLayer h = random_layer(kK, kN, 4, Codebook::kMul1, 61);
  const DeviceLayer d(h);
  for (const int64_t m : {int64_t{1}, kGemvNormMaxRows}) {
    SCOPED_TRACE(::testing::Message() << m << " rows");
    std::mt19937 rng(62 + static_cast<uint32_t>(m));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
    Tensor x = Tensor::zeros(DType::kF32, {m, kK});
    Tensor weight = Tensor::zeros(DType::kF32, {kK});
    for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] = normal(rng);
    for (int64_t i = 0; i < kK; ++i) weight.mutable_data<float>()[i] = uniform(rng);
    const Tensor normed = rms_norm_ref(x, weight, kEps);
    std::vector<uint16_t> h_bits(static_cast<size_t>(m * kK));
    for (size_t i = 0; i < h_bits.size(); ++i) h_bits[i] = float_to_half_bits(normed.data<float>()[i]);
    const std::vector<float> want = reference_int8_linear(h, gpu_transformed_input(h, d, h_bits, m, kK), kN, {});
    LinearCall call = int8_call(m, kK, kN, h_bits, 64 * m);
    call.norm_x = x.data<float>();
    call.norm_weight = weight.data<float>();
    call.norm_eps = kEps;
    const Deviation fused = compare(gpu_linear(h, d, call), want);
    EXPECT_LE(fused.rel_rms, 1e-3) << "fused RMSNorm vs the norm, then the linear";
  }
}

// With a scratch_c too small for the few-rows path's k-slices, int8 activations give way to the
// fp16 path (launch_exl3_gemm) instead of failing: the call without them, up to that path's
// split-K atomics (last bits; int8 would move the output by ~0.7%).
TEST_F(Exl3GemvInt8GpuTest, TooLittleScratchFallsBackToFp16) {
  constexpr int64_t kM = 16, kK = 14336, kN = 384;
  const HostLayer h = random_layer(kK, kN, 4, Codebook::kMul1, 51);
  const DeviceLayer d(h);
  std::mt19937 rng(52);
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(kM * kK), rng);
  // Room for one k-slice; the int8 path needs ceil(896 / 24) of them.
  LinearCall call = int8_call(kM, kK, kN, x, kM);
  const std::vector<float> with_int8 = gpu_linear(h, d, call);
  call.int8_activations = false;
  const std::vector<float> without = gpu_linear(h, d, call);
  ASSERT_EQ(with_int8.size(), without.size());
  EXPECT_LE(compare(with_int8, without).rel_rms, kRelRms);
}

// A NaN or an infinity in a row's input makes that row's outputs NaN (as the fp16 path's would be);
// the other rows stay exact.
TEST_F(Exl3GemvInt8GpuTest, NonFiniteInputPoisonsOnlyItsRow) {
  constexpr int64_t kM = 3, kK = 512, kN = 256;
  const HostLayer h = random_layer(kK, kN, 4, Codebook::kMul1, 41);
  const DeviceLayer d(h);
  std::mt19937 rng(42);
  std::vector<uint16_t> x = normal_halves(static_cast<size_t>(kM * kK), rng);
  x[static_cast<size_t>(1 * kK + 300)] = 0x7E00;  // NaN
  x[static_cast<size_t>(2 * kK + 17)] = 0x7C00;   // +inf
  const std::vector<float> got = gpu_linear(h, d, int8_call(kM, kK, kN, x, 64 * kM));
  for (int64_t r = 1; r < kM; ++r) {
    for (int64_t j = 0; j < kN; ++j) {
      ASSERT_TRUE(std::isnan(got[static_cast<size_t>(r * kN + j)])) << "row " << r << " column " << j;
    }
  }
  std::vector<uint16_t> clean(x.begin(), x.begin() + kK);
  const Tensor a = gpu_transformed_input(h, d, clean, 1, kK);
  const std::vector<float> want = reference_int8_linear(h, a, kN, {});
  const Deviation dev = compare(std::span<const float>(got.data(), kN), want);
  EXPECT_LE(dev.rel_rms, kRelRms);
}

}  // namespace
}  // namespace exl3
