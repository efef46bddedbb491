// Tests of exl3_dequantize_ref and exl3_linear_ref on layer 0 of the 4.0 bpw fixture model
// against ExLlamaV3's own reconstructed weights and GEMM outputs
// (tests/data/reference/exl3_4.0bpw_linears.safetensors).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "common/fixture_linear.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

// ExLlamaV3 rounds to fp16 after every step of get_weight_tensor(); we compute in fp32.
constexpr double kWeightTolerance = 2e-4;
// y_forward comes from ExLlamaV3's fp16-activation GEMM kernel.
constexpr double kForwardTolerance = 3e-3;
// Two fp32 evaluations of the same math in different orders.
constexpr double kPathsTolerance = 2e-5;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  const Tensor fa = a.to_f32();
  const Tensor fb = b.to_f32();
  double max_err = 0.0;
  for (int64_t i = 0; i < fa.numel(); ++i) {
    max_err = std::max(max_err, std::fabs(double{fa.data<float>()[i]} - fb.data<float>()[i]));
  }
  return max_err;
}

double max_abs(const Tensor& a) {
  const Tensor f = a.to_f32();
  double m = 0.0;
  for (int64_t i = 0; i < f.numel(); ++i) m = std::max(m, std::fabs(double{f.data<float>()[i]}));
  return m;
}

// x [m, k] · w [k, n] in double, rounded to fp32.
Tensor matmul_double(const Tensor& x, const Tensor& w) {
  const int64_t m = x.dim(0);
  const int64_t k = x.dim(1);
  const int64_t n = w.dim(1);
  Tensor y = Tensor::zeros(DType::kF32, {m, n});
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < k; ++i) sum += double{x.data<float>()[r * k + i]} * w.data<float>()[i * n + j];
      y.mutable_data<float>()[r * n + j] = static_cast<float>(sum);
    }
  }
  return y;
}

class Exl3LinearTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::FixtureLinear f;
    ASSERT_NO_FATAL_FAILURE(
        testing::load_fixture_linear(GetParam(), {"weight_reconstructed", "x", "y_forward", "suh", "svh"}, f));
    weight_ = f.weight;
    ref_ = f.dump;
  }

  Exl3Weight weight_;
  std::map<std::string, Tensor> ref_;
};

TEST_P(Exl3LinearTest, ScalesMatchTheReferenceDump) {
  EXPECT_EQ(max_abs_diff(weight_.suh, ref_["suh"]), 0.0);
  EXPECT_EQ(max_abs_diff(weight_.svh, ref_["svh"]), 0.0);
}

TEST_P(Exl3LinearTest, DequantizeMatchesExllamaReconstructedWeight) {
  const Tensor w = exl3_dequantize_ref(weight_);
  ASSERT_EQ(w.shape(), Shape({weight_.k, weight_.n}));
  const double err = max_abs_diff(w, ref_["weight_reconstructed"]);
  std::printf("%s: max |W - weight_reconstructed| = %.3g (max |W| = %.3g)\n", GetParam().c_str(),
              err, max_abs(ref_["weight_reconstructed"]));
  EXPECT_LE(err, kWeightTolerance);
}

TEST_P(Exl3LinearTest, ForwardMatchesExllamaGemm) {
  const Tensor y = exl3_linear_ref(weight_, ref_["x"]);
  ASSERT_EQ(y.shape(), Shape({ref_["x"].dim(0), weight_.n}));
  const double err = max_abs_diff(y, ref_["y_forward"]);
  std::printf("%s: max |y - y_forward| = %.3g (max |y| = %.3g)\n", GetParam().c_str(), err,
              max_abs(ref_["y_forward"]));
  EXPECT_LE(err, kForwardTolerance);
}

TEST_P(Exl3LinearTest, DequantizeThenMatmulAgreesWithForward) {
  const Tensor y_forward = exl3_linear_ref(weight_, ref_["x"]);
  const Tensor y_matmul = matmul_double(ref_["x"], exl3_dequantize_ref(weight_));
  const double err = max_abs_diff(y_forward, y_matmul);
  std::printf("%s: max |x·dequantize(W) - linear(x)| = %.3g\n", GetParam().c_str(), err);
  EXPECT_LE(err, kPathsTolerance);
}

INSTANTIATE_TEST_SUITE_P(Layer0, Exl3LinearTest,
                         ::testing::Values("self_attn.q_proj", "mlp.down_proj"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "self_attn.q_proj" ? std::string("QProj")
                                                                   : std::string("DownProj");
                         });

}  // namespace
}  // namespace exl3
