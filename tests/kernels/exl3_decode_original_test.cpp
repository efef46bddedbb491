// Tests of exl3_decode_original_ref (the spec of the long-prefill weight, kernels/ref/
// exl3_decode_original_ref.h): against ExLlamaV3's get_weight_tensor() on layer 0 of the 4.0 bpw
// fixture (weight_reconstructed, and the outputs y_forward_reconstruct / x @ W), and against the
// fp32 exl3_dequantize_ref on the fixture and on random layers of every codebook.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/fixture_linear.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "kernels/ref/exl3_decode_original_ref.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

// ExLlamaV3 rounds to fp16 after each of get_weight_tensor's four steps, we once at the end; its
// intermediate roundings are absolute errors of the size of the largest weights' ulp. Measured
// 6.1e-5 (one fp16 ulp of |W| in [1/16, 1/8), max |W| 0.117) on both layers, about 44% of the
// elements identical; exl3_dequantize_ref's fp32 weight is held to 2e-4 (exl3_linear_test.cpp).
constexpr double kWeightTolerance = 1e-4;
// x · W (our fp16 W, summed in double) against ExLlamaV3's reconstruct path and against
// x.float() @ weight_reconstructed: the weights' ulp-sized differences add up over k = 512 / 1536
// inputs to ~1.3e-3 (measured 1.25e-3 and 1.31e-3; ExLlamaV3's own y_forward_reconstruct is 1.35e-3
// from x @ W, fixtures/README.md); the bound of exl3_linear_test's forward check.
constexpr double kOutputTolerance = 3e-3;
// One rounding to fp16 of the fp32 weight: half an ulp, 2^-11 relative (2^-25 absolute among fp16
// subnormals), plus the fp32 summation-order noise of two evaluations of 2·7 butterfly stages, which
// scales with the block's magnitude, not the element's: 2^-20 · max |W| (a few fp32 ulps of the
// largest intermediate values).
constexpr double kHalfUlpRel = 1.0 / 2048.0;
constexpr double kHalfUlpAbs = 1.0 / 33554432.0;
constexpr double kFp32NoiseOfMax = 1.0 / 1048576.0;

std::vector<float> floats_of(const Tensor& t) {
  const Tensor f = t.to_f32();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

// |got - exact| within half an fp16 ulp of every element, plus the fp32 noise (see the constants).
void expect_half_ulp_of(const Tensor& got_half, const Tensor& exact_f32, const std::string& label) {
  const std::vector<float> got = floats_of(got_half);
  const std::vector<float> exact = floats_of(exact_f32);
  ASSERT_EQ(got.size(), exact.size()) << label;
  double max_exact = 0.0;
  for (float v : exact) max_exact = std::max(max_exact, std::fabs(double{v}));
  int64_t over = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - exact[i]);
    const double bound = kHalfUlpRel * std::fabs(double{exact[i]}) + kHalfUlpAbs + kFp32NoiseOfMax * max_exact;
    worst = std::max(worst, err / bound);
    if (!(err <= bound)) {
      if (over < 5) {
        std::printf("  %s: element %zu: %.8g vs fp32 %.8g (|err| %.3g > %.3g)\n", label.c_str(), i, got[i], exact[i],
                    err, bound);
      }
      ++over;
    }
  }
  std::printf("%s: worst |W - W_fp32| / bound = %.3f\n", label.c_str(), worst);
  EXPECT_EQ(over, 0) << label;
}

Tensor half_tensor(const std::vector<uint16_t>& bits) {
  Tensor t = Tensor::zeros(DType::kF16, {static_cast<int64_t>(bits.size())});
  std::memcpy(t.mutable_raw(), bits.data(), bits.size() * sizeof(uint16_t));
  return t;
}

class Exl3DecodeOriginalFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::FixtureLinear f;
    ASSERT_NO_FATAL_FAILURE(testing::load_fixture_linear(
        GetParam(), {"weight_reconstructed", "x", "y_forward_reconstruct", "y_x_matmul_w_fp32"}, f));
    weight_ = f.weight;
    for (const char* name : {"weight_reconstructed", "x", "y_forward_reconstruct", "y_x_matmul_w_fp32"}) {
      ref_.push_back(f.dump[name]);
    }
  }

  const Tensor& reconstructed() const { return ref_[0]; }
  const Tensor& x() const { return ref_[1]; }
  const Tensor& y_reconstruct() const { return ref_[2]; }
  const Tensor& y_matmul() const { return ref_[3]; }

  Exl3Weight weight_;
  std::vector<Tensor> ref_;
};

TEST_P(Exl3DecodeOriginalFixtureTest, MatchesExllamaReconstructedWeight) {
  const Tensor w = exl3_decode_original_ref(weight_);
  ASSERT_EQ(w.dtype(), DType::kF16);
  ASSERT_EQ(w.shape(), reconstructed().shape());
  const std::vector<float> got = floats_of(w);
  const std::vector<float> want = floats_of(reconstructed());
  double max_err = 0.0, max_w = 0.0;
  int64_t identical = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_err = std::max(max_err, std::fabs(double{got[i]} - want[i]));
    max_w = std::max(max_w, std::fabs(double{want[i]}));
    identical += got[i] == want[i];
  }
  std::printf("%s: max |W - weight_reconstructed| = %.3g (max |W| %.3g), %lld of %zu identical\n", GetParam().c_str(),
              max_err, max_w, static_cast<long long>(identical), got.size());
  EXPECT_LE(max_err, kWeightTolerance);
}

TEST_P(Exl3DecodeOriginalFixtureTest, WithinHalfAnUlpOfTheFp32Weight) {
  expect_half_ulp_of(exl3_decode_original_ref(weight_), exl3_dequantize_ref(weight_), GetParam());
}

TEST_P(Exl3DecodeOriginalFixtureTest, TimesXMatchesExllamaOutputs) {
  const std::vector<float> w = floats_of(exl3_decode_original_ref(weight_));
  const int64_t m = x().dim(0), k = weight_.k, n = weight_.n;
  ASSERT_EQ(x().dim(1), k);
  double err_reconstruct = 0.0, err_matmul = 0.0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < k; ++i) sum += double{x().data<float>()[r * k + i]} * w[static_cast<size_t>(i * n + j)];
      err_reconstruct = std::max(err_reconstruct, std::fabs(sum - y_reconstruct().data<float>()[r * n + j]));
      err_matmul = std::max(err_matmul, std::fabs(sum - y_matmul().data<float>()[r * n + j]));
    }
  }
  std::printf("%s: max |x·W - y_forward_reconstruct| = %.3g, max |x·W - x@weight_reconstructed| = %.3g\n",
              GetParam().c_str(), err_reconstruct, err_matmul);
  EXPECT_LE(err_reconstruct, kOutputTolerance);
  EXPECT_LE(err_matmul, kOutputTolerance);
}

INSTANTIATE_TEST_SUITE_P(Layer0, Exl3DecodeOriginalFixtureTest, ::testing::Values("self_attn.q_proj", "mlp.down_proj"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "self_attn.q_proj" ? std::string("QProj") : std::string("DownProj");
                         });

// Random trellis words (every bit pattern is a valid tile), sign-and-scale vectors as EXL3 stores
// them, k != n, odd numbers of 128-blocks.
TEST(Exl3DecodeOriginalRefTest, RandomLayersWithinHalfAnUlpOfTheFp32Weight) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  const struct {
    int64_t k, n;
    int bits;
    Codebook codebook;
  } cases[] = {{384, 128, 3, Codebook::k3Inst},
               {128, 640, 5, Codebook::kMcg},
               {256, 384, 2, Codebook::kMul1},
               {128, 128, 8, Codebook::kMul1},
               {384, 256, 1, Codebook::kMcg}};
  for (const auto& c : cases) {
    Exl3Weight w;
    w.k = c.k;
    w.n = c.n;
    w.bits = c.bits;
    w.codebook = c.codebook;
    std::vector<int16_t> words(static_cast<size_t>(c.k / 16 * (c.n / 16) * 16 * c.bits));
    for (int16_t& v : words) v = static_cast<int16_t>(rng() & 0xFFFFu);
    w.trellis = Tensor::from_vector(words, {c.k / 16, c.n / 16, 16 * c.bits});
    std::vector<uint16_t> suh(static_cast<size_t>(c.k)), svh(static_cast<size_t>(c.n));
    for (uint16_t& h : suh) h = float_to_half_bits((rng() & 1u) ? -scale(rng) : scale(rng));
    for (uint16_t& h : svh) h = float_to_half_bits((rng() & 1u) ? -scale(rng) : scale(rng));
    w.suh = half_tensor(suh);
    w.svh = half_tensor(svh);
    const std::string label = "k=" + std::to_string(c.k) + " n=" + std::to_string(c.n) +
                              " bits=" + std::to_string(c.bits) + " codebook " +
                              std::to_string(static_cast<int>(c.codebook));
    expect_half_ulp_of(exl3_decode_original_ref(w), exl3_dequantize_ref(w), label);
  }
}

}  // namespace
}  // namespace exl3
