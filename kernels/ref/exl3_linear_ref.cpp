// CPU references of one EXL3 linear layer (exl3-format.md §3): the dequantized weight
// W = diag(suh) · BD(H) · Wq · BD(H) · diag(svh) and the forward x -> y step by step.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;

void check_weight(const Exl3Weight& w) {
  EXL3_CHECK(w.k > 0 && w.k % kBlock == 0, "k must be a positive multiple of 128, got ", w.k);
  EXL3_CHECK(w.n > 0 && w.n % kBlock == 0, "n must be a positive multiple of 128, got ", w.n);
  EXL3_CHECK(w.bits >= 1 && w.bits <= 8, "bits must be in 1..8, got ", w.bits);
  EXL3_CHECK(w.trellis.defined() && w.trellis.shape() == Shape({w.k / 16, w.n / 16, 16 * w.bits}),
             "trellis shape ", shape_string(w.trellis.shape()), " for k=", w.k, " n=", w.n,
             " bits=", w.bits);
  EXL3_CHECK(w.suh.defined() && w.suh.dtype() == DType::kF16 && w.suh.shape() == Shape({w.k}),
             "suh must be F16 [", w.k, "]");
  EXL3_CHECK(w.svh.defined() && w.svh.dtype() == DType::kF16 && w.svh.shape() == Shape({w.n}),
             "svh must be F16 [", w.n, "]");
}

std::vector<float> half_vector(const Tensor& t) {
  const auto* bits = static_cast<const uint16_t*>(t.raw());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = half_bits_to_float(bits[i]);
  return out;
}

// Wq decoded and widened to fp32, [k, n].
std::vector<float> inner_weight_f32(const Exl3Weight& w) {
  return half_vector(exl3_decode_ref(w.trellis, w.bits, w.codebook));
}

// In-place BD_k(H) · M for a row-major [k, n] matrix: the same butterfly as hadamard128_ref, run
// down the columns, where each butterfly element is a whole row (so the inner loop is contiguous).
void hadamard128_columns(float* m, int64_t k, int64_t n) {
  for (int64_t block = 0; block < k; block += kBlock) {
    for (int64_t h = 1; h < kBlock; h *= 2) {
      for (int64_t group = block; group < block + kBlock; group += 2 * h) {
        for (int64_t i = group; i < group + h; ++i) {
          float* a = m + i * n;
          float* b = m + (i + h) * n;
          for (int64_t j = 0; j < n; ++j) {
            const float sum = a[j] + b[j];
            const float diff = a[j] - b[j];
            a[j] = sum;
            b[j] = diff;
          }
        }
      }
    }
  }
}

}  // namespace

Tensor exl3_dequantize_ref(const Exl3Weight& w) {
  check_weight(w);
  const std::vector<float> suh = half_vector(w.suh);
  const std::vector<float> svh = half_vector(w.svh);

  Tensor out = Tensor::zeros(DType::kF32, {w.k, w.n});
  float* m = out.mutable_data<float>();
  const std::vector<float> wq = inner_weight_f32(w);
  std::copy(wq.begin(), wq.end(), m);

  // Wq · BD_n(H): the row transform, scaled by 1/sqrt(128).
  hadamard128_ref(m, w.k, w.n);
  // BD_k(H) · (...): unscaled column butterflies; the 1/sqrt(128) is folded into suh below.
  hadamard128_columns(m, w.k, w.n);
  constexpr float kInvSqrt128 = 0.08838834764831845f;
  for (int64_t i = 0; i < w.k; ++i) {
    const float row_scale = suh[i] * kInvSqrt128;
    float* row = m + i * w.n;
    for (int64_t j = 0; j < w.n; ++j) row[j] *= row_scale * svh[j];
  }
  return out;
}

Tensor exl3_linear_ref(const Exl3Weight& w, const Tensor& x) {
  check_weight(w);
  EXL3_CHECK(x.dtype() == DType::kF32 && x.rank() == 2 && x.dim(1) == w.k, "x must be F32 [m, ",
             w.k, "], got ", dtype_name(x.dtype()), " ", shape_string(x.shape()));
  const int64_t m = x.dim(0);
  const std::vector<float> suh = half_vector(w.suh);
  const std::vector<float> svh = half_vector(w.svh);
  const std::vector<float> wq = inner_weight_f32(w);

  // x1 = x ⊙ suh
  std::vector<float> xh(static_cast<size_t>(m * w.k));
  const float* xs = x.data<float>();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < w.k; ++i) xh[r * w.k + i] = xs[r * w.k + i] * suh[i];
  }
  // x2 = x1 · BD_k(H)
  hadamard128_ref(xh.data(), m, w.k);

  // y1 = x2 · Wq
  Tensor y = Tensor::zeros(DType::kF32, {m, w.n});
  float* ys = y.mutable_data<float>();
  for (int64_t r = 0; r < m; ++r) {
    float* yrow = ys + r * w.n;
    for (int64_t i = 0; i < w.k; ++i) {
      const float xi = xh[r * w.k + i];
      const float* wrow = wq.data() + i * w.n;
      for (int64_t j = 0; j < w.n; ++j) yrow[j] += xi * wrow[j];
    }
  }
  // y2 = y1 · BD_n(H); y = y2 ⊙ svh
  hadamard128_ref(ys, m, w.n);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < w.n; ++j) ys[r * w.n + j] *= svh[j];
  }
  return y;
}

}  // namespace exl3
