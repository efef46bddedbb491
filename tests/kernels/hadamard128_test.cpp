// Tests of hadamard128_ref: against an explicit product with H128 / sqrt(128) (entries
// (-1)^popcount(i & j)), the involution H·H = I, and the shape contract.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

constexpr int kBlock = 128;

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (float& v : m) v = dist(rng);
  return m;
}

// Each 128-block of each row times the explicit matrix, in double.
std::vector<double> explicit_hadamard(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const double scale = 1.0 / std::sqrt(128.0);
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t base = 0; base < cols; base += kBlock) {
      for (int j = 0; j < kBlock; ++j) {
        double sum = 0.0;
        for (int i = 0; i < kBlock; ++i) {
          const double sign = (std::popcount(static_cast<unsigned>(i & j)) % 2 == 0) ? 1.0 : -1.0;
          sum += x[r * cols + base + i] * sign;
        }
        y[r * cols + base + j] = sum * scale;
      }
    }
  }
  return y;
}

TEST(Hadamard128, MatchesExplicitMatrixProduct) {
  constexpr int64_t kRows = 5;
  constexpr int64_t kCols = 3 * kBlock;
  const std::vector<float> x = random_matrix(kRows, kCols, 7);
  std::vector<float> got = x;
  hadamard128_ref(got.data(), kRows, kCols);
  const std::vector<double> want = explicit_hadamard(x, kRows, kCols);
  double max_err = 0.0;
  for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  std::printf("max |butterfly - explicit H128 product| = %.3g\n", max_err);
  EXPECT_LT(max_err, 1e-5);
}

TEST(Hadamard128, UnitVectorsGiveTheMatrixRows) {
  // e_i · Ĥ is row i of Ĥ: every entry ±1/sqrt(128), sign (-1)^popcount(i & j).
  for (int i : {0, 1, 5, 64, 127}) {
    std::vector<float> x(kBlock, 0.0f);
    x[i] = 1.0f;
    hadamard128_ref(x.data(), 1, kBlock);
    for (int j = 0; j < kBlock; ++j) {
      const float sign = (std::popcount(static_cast<unsigned>(i & j)) % 2 == 0) ? 1.0f : -1.0f;
      EXPECT_NEAR(x[j], sign / std::sqrt(128.0f), 1e-7f) << "row " << i << " col " << j;
    }
  }
}

TEST(Hadamard128, IsAnInvolution) {
  constexpr int64_t kRows = 4;
  constexpr int64_t kCols = 2 * kBlock;
  const std::vector<float> x = random_matrix(kRows, kCols, 11);
  std::vector<float> y = x;
  hadamard128_ref(y.data(), kRows, kCols);
  hadamard128_ref(y.data(), kRows, kCols);
  double max_err = 0.0;
  for (size_t i = 0; i < y.size(); ++i) max_err = std::max(max_err, std::fabs(double{y[i]} - x[i]));
  std::printf("max |H(H(x)) - x| = %.3g\n", max_err);
  EXPECT_LT(max_err, 1e-5);
}

TEST(Hadamard128DeathTest, RejectsColsNotMultipleOf128) {
  std::vector<float> x(200, 0.0f);
  EXPECT_DEATH(hadamard128_ref(x.data(), 1, 200), "multiple of 128");
}

}  // namespace
}  // namespace exl3
