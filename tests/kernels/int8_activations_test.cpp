// Tests of int8 activations for the few-rows EXL3 matmul (kernels/int8_activations.h):
//   - the mode names and the one rule both backends follow;
//   - the per-block quantization of the reference on hand-computed blocks (one large value, all
//     zeros, exact ties rounding to even, ±amax giving exactly ±127 whichever side of 127 the fp32
//     product lands) and its error on N(0,1) blocks (relative RMS <= 0.01; ~0.0066 expected: a step
//     of amax/127 with amax ≈ 2.9σ);
//   - exl3_gemv_int8_ref against two independent double computations from exl3_decode_ref's fp16
//     values: with each value's byte sum recovered exactly (relative 1e-12) and with the fp16 values
//     themselves (at most 2^-10 · Σ|a'| apart: half an fp16 ulp in [2, 4) per weight);
//   - the CPU backend's int8 path (kOn, rows <= 16) against the spec composed step by step
//     (relative RMS 6e-4: the backend multiplies with the fp16-decoded Wq, the spec with the
//     unrounded values, at most 2^-11 apart relatively per weight), its closeness to kOff (relative
//     RMS < 0.03), 17 rows through Wq in fp32 (the folded W's result within relative RMS 1e-5),
//     kAuto at 8 bits and 3INST weights on the folded W bit-equal to kOff, and the bytes it counts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/fp16.h"
#include "kernels/int8_activations.h"
#include "kernels/ops.h"
#include "kernels/ref/int8_activations_ref.h"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;
constexpr double kMul1Inv = 0.00676727294921875;
constexpr double kMul1Bias = -10.3828125;

TEST(Int8Activations, NamesAndParsing) {
  for (Int8Activations m : {Int8Activations::kOff, Int8Activations::kAuto, Int8Activations::kOn}) {
    const absl::StatusOr<Int8Activations> back = parse_int8_activations(int8_activations_name(m), "--x");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, m);
  }
  const absl::StatusOr<Int8Activations> bad = parse_int8_activations("yes", "--int8-activations");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--int8-activations \"yes\""), std::string::npos) << bad.status();
  EXPECT_FALSE(parse_int8_activations("Auto", "--x").ok());
}

TEST(Int8Activations, OneRule) {
  using M = Int8Activations;
  EXPECT_FALSE(use_int8_activations(M::kOff, 4, Codebook::kMul1, 1));
  EXPECT_TRUE(use_int8_activations(M::kAuto, 4, Codebook::kMul1, 1));
  EXPECT_TRUE(use_int8_activations(M::kAuto, 6, Codebook::kMul1, kInt8ActivationsMaxRows));
  EXPECT_FALSE(use_int8_activations(M::kAuto, 6, Codebook::kMul1, kInt8ActivationsMaxRows + 1));
  EXPECT_FALSE(use_int8_activations(M::kAuto, 7, Codebook::kMul1, 1));
  EXPECT_TRUE(use_int8_activations(M::kOn, 8, Codebook::kMul1, 1));
  EXPECT_FALSE(use_int8_activations(M::kOn, 4, Codebook::kMul1, kInt8ActivationsMaxRows + 1));
  EXPECT_FALSE(use_int8_activations(M::kOn, 4, Codebook::kMul1, 0));
  EXPECT_FALSE(use_int8_activations(M::kOn, 4, Codebook::k3Inst, 1));
  EXPECT_FALSE(use_int8_activations(M::kOn, 4, Codebook::kMcg, 1));
}

std::vector<float> quantize_back(const std::vector<float>& block, std::vector<int8_t>& q, float& scale) {
  q.assign(kBlock, 0);
  scale = int8_quantize_block_ref(block.data(), q.data());
  std::vector<float> back(block);
  int8_quantize_dequantize_ref(back.data(), 1, kBlock);
  return back;
}

TEST(Int8ActivationsRef, OneLargeValue) {
  std::vector<float> a(kBlock, 1.0f);
  a[17] = -1000.0f;
  a[40] = 4.0f;  // 4 · 127/1000 = 0.508 -> 1
  a[41] = 3.9f;  // 0.4953 -> 0
  std::vector<int8_t> q;
  float scale = 0.0f;
  const std::vector<float> back = quantize_back(a, q, scale);
  EXPECT_EQ(scale, 1000.0f / 127.0f);
  EXPECT_EQ(q[17], -127);
  EXPECT_EQ(q[0], 0);  // 0.127 rounds to 0: small values vanish next to a large one
  EXPECT_EQ(q[40], 1);
  EXPECT_EQ(q[41], 0);
  EXPECT_EQ(back[17], -127.0f * scale);
  EXPECT_EQ(back[40], scale);
  EXPECT_EQ(back[0], 0.0f);
}

TEST(Int8ActivationsRef, AllZerosGiveZeroScale) {
  const std::vector<float> a(kBlock, 0.0f);
  std::vector<int8_t> q;
  float scale = -1.0f;
  const std::vector<float> back = quantize_back(a, q, scale);
  EXPECT_EQ(scale, 0.0f);
  for (int64_t i = 0; i < kBlock; ++i) {
    EXPECT_EQ(q[i], 0);
    EXPECT_EQ(back[i], 0.0f);
  }
}

// A NaN or an infinity makes the block's scale NaN and every value of it NaN (as the CUDA kernel
// makes the row's outputs NaN), never finite numbers.
TEST(Int8ActivationsRef, NonFiniteValuesPoisonTheirBlock) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    std::vector<float> a(kBlock, 0.5f);
    a[3] = bad;
    std::vector<int8_t> q;
    float scale = 0.0f;
    const std::vector<float> back = quantize_back(a, q, scale);
    EXPECT_TRUE(std::isnan(scale)) << bad;
    for (int64_t i = 0; i < kBlock; ++i) {
      EXPECT_EQ(q[i], 0) << bad << " at " << i;
      EXPECT_TRUE(std::isnan(back[i])) << bad << " at " << i;
    }
  }
}

TEST(Int8ActivationsRef, TiesRoundToEven) {
  // amax 127: inv = 1 exactly, so a · inv = a and the ties are exact.
  std::vector<float> a(kBlock, 0.0f);
  a[0] = 127.0f;
  const float ties[] = {2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f, 2.4999998f, 2.5000002f};
  const int want[] = {2, 4, -2, -4, 0, 0, 2, 126, -126, 2, 3};
  for (size_t i = 0; i < std::size(ties); ++i) a[1 + i] = ties[i];
  std::vector<int8_t> q;
  float scale = 0.0f;
  quantize_back(a, q, scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q[0], 127);
  for (size_t i = 0; i < std::size(ties); ++i) EXPECT_EQ(q[1 + i], want[i]) << "a = " << ties[i];
  // A second block where the tie comes from the product: amax 254 gives inv 0.5, 5 · 0.5 = 2.5 -> 2.
  std::vector<float> b(kBlock, 0.0f);
  b[3] = 254.0f;
  b[4] = 5.0f;
  b[5] = 7.0f;  // 3.5 -> 4
  quantize_back(b, q, scale);
  EXPECT_EQ(q[4], 2);
  EXPECT_EQ(q[5], 4);
  EXPECT_EQ(scale, 2.0f);
}

TEST(Int8ActivationsRef, AmaxGivesExactly127EitherSideOfTheProduct) {
  // amax · (127 / amax) lands above 127 in fp32 for some amax: the rounding (and the clamp) must
  // still give ±127, never -128 or an overflow.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(1e-6f, 1e6f);
  int above = 0;
  for (int t = 0; t < 2000; ++t) {
    std::vector<float> a(kBlock, 0.0f);
    const float amax = mag(rng);
    a[t % kBlock] = (t % 2 == 0) ? amax : -amax;
    a[(t + 1) % kBlock] = amax * 0.5f;
    const float inv = 127.0f / amax;
    if (amax * inv > 127.0f) ++above;
    std::vector<int8_t> q(kBlock);
    const float scale = int8_quantize_block_ref(a.data(), q.data());
    ASSERT_EQ(q[t % kBlock], (t % 2 == 0) ? 127 : -127) << "amax " << amax;
    ASSERT_EQ(scale, amax / 127.0f);
    for (int8_t v : q) ASSERT_GE(v, -127);
  }
  std::printf("fp32 products above 127 at ±amax: %d of 2000\n", above);
  EXPECT_GT(above, 0) << "no case exercised the product above 127";
}

TEST(Int8ActivationsRef, GaussianBlocksRelativeRmsError) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 5, k = 128 * 37;
  Tensor a = Tensor::zeros(DType::kF32, {rows, k});
  for (int64_t i = 0; i < a.numel(); ++i) a.mutable_data<float>()[i] = normal(rng) * (1.0f + static_cast<float>(i / k));
  const Int8ActivationsRef qa = int8_quantize_activations_ref(a);
  const Tensor back = int8_dequantize_activations_ref(qa);
  std::vector<float> inplace(a.data<float>(), a.data<float>() + a.numel());
  int8_quantize_dequantize_ref(inplace.data(), rows, k);
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(back.data<float>()[i], inplace[i]) << i;
    const double d = double{back.data<float>()[i]} - a.data<float>()[i];
    err2 += d * d;
    ref2 += double{a.data<float>()[i]} * a.data<float>()[i];
  }
  const double rel = std::sqrt(err2 / ref2);
  std::printf("int8 quantize-dequantize of N(0,1) blocks: relative RMS error %.5f\n", rel);
  EXPECT_LE(rel, 0.01);
  EXPECT_GE(rel, 0.003);  // it does round
}

TEST(Int8ActivationsRef, Mul1ValueRoundsToTheCodebook) {
  for (uint32_t s = 0; s < 65536; ++s) {
    const uint16_t state = static_cast<uint16_t>(s);
    ASSERT_EQ(double_to_half_bits(exl3_mul1_value_ref(state)), exl3_codebook_ref(state, Codebook::kMul1))
        << "state " << s;
  }
}

Tensor random_trellis(int64_t k, int64_t n, int bits, std::mt19937& rng) {
  Tensor t = Tensor::zeros(DType::kI16, {k / 16, n / 16, 16 * bits});
  std::uniform_int_distribution<int> word(-32768, 32767);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<int16_t>()[i] = static_cast<int16_t>(word(rng));
  return t;
}

Tensor random_normal(const Shape& shape, std::mt19937& rng, float sigma) {
  Tensor t = Tensor::zeros(DType::kF32, shape);
  std::normal_distribution<float> normal(0.0f, sigma);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = normal(rng);
  return t;
}

TEST(Int8ActivationsRef, GemvMatchesDoubleFromDecodedValues) {
  std::mt19937 rng(23);
  const int64_t m = 3, k = 384, n = 48;
  for (int bits : {2, 4, 6}) {
    const Tensor trellis = random_trellis(k, n, bits, rng);
    const Tensor a = random_normal({m, k}, rng, 0.7f);
    const Int8ActivationsRef qa = int8_quantize_activations_ref(a);
    const std::vector<double> got = exl3_gemv_int8_ref(trellis, bits, qa);
    const std::vector<double> got_from_a = exl3_gemv_int8_ref(trellis, bits, a);
    const Tensor wq = exl3_decode_ref(trellis, bits, Codebook::kMul1);
    const auto* wbits = static_cast<const uint16_t*>(wq.raw());
    double worst_exact = 0.0, worst_fp16 = 0.0, max_fp16_diff = 0.0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0.0, fp16 = 0.0, abs_sum = 0.0, abs_terms = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double v16 = half_bits_to_float(wbits[i * n + j]);
          // The byte sum behind the fp16 value: consecutive sums lie 0.0068 apart, more than an
          // fp16 ulp (at most 2^-9 here), so rounding recovers it exactly.
          const double t = std::nearbyint((v16 - kMul1Bias) / kMul1Inv - 1024.0);
          // a' in double (q · scale is exact there; the fp32 product of the dequantized tensor is not).
          const double ai =
              static_cast<double>(qa.q.data<int8_t>()[r * k + i]) * qa.scales.data<float>()[r * (k / kBlock) + i / kBlock];
          exact += ai * (kMul1Inv * (1024.0 + t) + kMul1Bias);
          fp16 += ai * v16;
          abs_sum += std::fabs(ai);
          abs_terms += std::fabs(ai * v16);
        }
        const double g = got[r * n + j];
        ASSERT_EQ(g, got_from_a[r * n + j]);
        worst_exact = std::max(worst_exact, std::fabs(g - exact) / (abs_terms + 1e-30));
        const double fp16_bound = std::ldexp(abs_sum, -10) + 1e-12 * abs_terms;
        worst_fp16 = std::max(worst_fp16, std::fabs(g - fp16) / fp16_bound);
        max_fp16_diff = std::max(max_fp16_diff, std::fabs(g - fp16));
        if (std::fabs(g - exact) > 1e-12 * abs_terms || std::fabs(g - fp16) > fp16_bound) {
          ADD_FAILURE() << "bits " << bits << " C[" << r << ", " << j << "] = " << g << ", exact " << exact
                        << ", from fp16 values " << fp16 << " (bound " << fp16_bound << ")";
          return;
        }
      }
    }
    std::printf("K=%d: worst |C - exact| / Σ|terms| %.3g, worst |C - fp16 values| / bound %.3f (max %.3g)\n", bits,
                worst_exact, worst_fp16, max_fp16_diff);
    EXPECT_GT(max_fp16_diff, 0.0) << "the reference should use the unrounded values";
  }
}

// ---- The CPU backend -------------------------------------------------------------------------

Tensor random_half(int64_t n, std::mt19937& rng) {
  Tensor t = Tensor::zeros(DType::kF16, {n});
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < n; ++i) {
    static_cast<uint16_t*>(t.mutable_raw())[i] = float_to_half_bits(sign(rng) ? u(rng) : -u(rng));
  }
  return t;
}

HostLinear random_linear(int64_t in, int64_t out, int bits, Codebook cb, std::mt19937& rng) {
  HostLinear h;
  h.in_features = in;
  h.out_features = out;
  h.is_exl3 = true;
  h.exl3.k = (in + 127) / 128 * 128;
  h.exl3.n = (out + 127) / 128 * 128;
  h.exl3.bits = bits;
  h.exl3.codebook = cb;
  h.exl3.trellis = random_trellis(h.exl3.k, h.exl3.n, bits, rng);
  h.exl3.suh = random_half(h.exl3.k, rng);
  h.exl3.svh = random_half(h.exl3.n, rng);
  h.bias = random_normal({out}, rng, 0.1f);
  return h;
}

Tensor run_linear(Backend& b, const LinearWeights& w, const Tensor& x) {
  Tensor y = Tensor::zeros(DType::kF32, {x.dim(0), w.out_features});
  b.linear(w, x, y);
  return y;
}

// The spec step by step: a = fp16(had(fp16(x ⊙ suh))), c = exl3_gemv_int8_ref, y = had(c) ⊙ svh + bias.
Tensor spec_linear(const HostLinear& h, const Tensor& x) {
  const int64_t m = x.dim(0), k = h.exl3.k, n = h.exl3.n;
  const auto* suh = static_cast<const uint16_t*>(h.exl3.suh.raw());
  const auto* svh = static_cast<const uint16_t*>(h.exl3.svh.raw());
  Tensor a = Tensor::zeros(DType::kF32, {m, k});
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < h.in_features; ++i) {
      const float xi = x.data<float>()[r * h.in_features + i];
      a.mutable_data<float>()[r * k + i] = round_to_half(xi * half_bits_to_float(suh[i]));
    }
  }
  hadamard128_ref(a.mutable_data<float>(), m, k);
  for (int64_t i = 0; i < a.numel(); ++i) a.mutable_data<float>()[i] = round_to_half(a.data<float>()[i]);
  const std::vector<double> c = exl3_gemv_int8_ref(h.exl3.trellis, h.exl3.bits, a);
  std::vector<float> cf(c.begin(), c.end());
  hadamard128_ref(cf.data(), m, n);
  Tensor y = Tensor::zeros(DType::kF32, {m, h.out_features});
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < h.out_features; ++j) {
      y.mutable_data<float>()[r * h.out_features + j] =
          cf[r * n + j] * half_bits_to_float(svh[j]) + h.bias.data<float>()[j];
    }
  }
  return y;
}

double rms(const Tensor& t) {
  double s = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) s += double{t.data<float>()[i]} * t.data<float>()[i];
  return std::sqrt(s / static_cast<double>(std::max<int64_t>(t.numel(), 1)));
}

double rms_diff(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = double{a.data<float>()[i]} - b.data<float>()[i];
    s += d * d;
  }
  return std::sqrt(s / static_cast<double>(std::max<int64_t>(a.numel(), 1)));
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
}

TEST(CpuBackendInt8Activations, FewRowsFollowTheSpec) {
  std::mt19937 rng(31);
  CpuBackendOptions on;
  on.int8_activations = Int8Activations::kOn;
  const std::unique_ptr<Backend> b_on = make_cpu_backend(on);
  const std::unique_ptr<Backend> b_off = make_cpu_backend();
  // Padded on both sides (300 -> 384 inputs, 200 -> 256 outputs).
  const HostLinear h = random_linear(300, 200, 4, Codebook::kMul1, rng);
  const absl::StatusOr<LinearWeights> w_on = b_on->prepare_linear(h, "w");
  const absl::StatusOr<LinearWeights> w_off = b_off->prepare_linear(h, "w");
  ASSERT_TRUE(w_on.ok() && w_off.ok());
  ASSERT_TRUE(w_on->inner.defined());
  EXPECT_FALSE(w_on->dense.defined());
  EXPECT_FALSE(w_off->inner.defined());
  // Wq (F32 [384, 256]), suh, svh and the bias in place of the folded F32 [300, 200] and the bias.
  EXPECT_EQ(w_on->bytes, 384 * 256 * 4 + 384 * 2 + 256 * 2 + 200 * 4);
  EXPECT_EQ(w_off->bytes, 300 * 200 * 4 + 200 * 4);
  EXPECT_EQ(b_on->allocated_bytes(), w_on->bytes);
  for (int64_t m : {int64_t{1}, int64_t{5}, kInt8ActivationsMaxRows}) {
    const Tensor x = random_normal({m, 300}, rng, 1.0f);
    const Tensor got = run_linear(*b_on, *w_on, x);
    const Tensor want = spec_linear(h, x);
    const Tensor off = run_linear(*b_off, *w_off, x);
    const double rel_spec = rms_diff(got, want) / rms(want), rel_off = rms_diff(got, off) / rms(off);
    std::printf("rows %lld: int8 vs spec relative RMS %.3g, vs fp32 activations %.4f\n", static_cast<long long>(m),
                rel_spec, rel_off);
    EXPECT_LE(rel_spec, 6e-4);
    EXPECT_LE(rel_off, 0.03);
    EXPECT_GT(rel_off, 1e-3) << "the int8 path was not taken";
  }
  // One row more: fp32 activations through Wq, the folded W's result up to fp32 rounding.
  const Tensor x33 = random_normal({kInt8ActivationsMaxRows + 1, 300}, rng, 1.0f);
  const Tensor off33 = run_linear(*b_off, *w_off, x33);
  const double rel33 = rms_diff(run_linear(*b_on, *w_on, x33), off33) / rms(off33);
  std::printf("rows %lld: through Wq vs the folded W relative RMS %.3g\n",
              static_cast<long long>(kInt8ActivationsMaxRows + 1), rel33);
  EXPECT_LE(rel33, 1e-5);
}

TEST(CpuBackendInt8Activations, OtherWeightsKeepTheDensePath) {
  std::mt19937 rng(37);
  CpuBackendOptions automatic;
  automatic.int8_activations = Int8Activations::kAuto;
  const std::unique_ptr<Backend> b_auto = make_cpu_backend(automatic);
  const std::unique_ptr<Backend> b_off = make_cpu_backend();
  const Tensor x = random_normal({2, 256}, rng, 1.0f);
  for (const auto& [bits, cb, int8] : {std::tuple{8, Codebook::kMul1, false}, std::tuple{3, Codebook::k3Inst, false},
                                       std::tuple{6, Codebook::kMul1, true}}) {
    const HostLinear h = random_linear(256, 128, bits, cb, rng);
    const absl::StatusOr<LinearWeights> w_auto = b_auto->prepare_linear(h, "w");
    const absl::StatusOr<LinearWeights> w_off = b_off->prepare_linear(h, "w");
    ASSERT_TRUE(w_auto.ok() && w_off.ok());
    EXPECT_EQ(w_auto->inner.defined(), int8) << "K=" << bits;
    EXPECT_EQ(bit_equal(run_linear(*b_auto, *w_auto, x), run_linear(*b_off, *w_off, x)), !int8) << "K=" << bits;
  }
}

}  // namespace
}  // namespace exl3
