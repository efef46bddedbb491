// CPU reference of the EXL3 decode into the original basis (exl3_decode_original_ref.h): simple
// loops in the order and roundings the header states.
#include "kernels/ref/exl3_decode_original_ref.h"

#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "kernels/fp16.h"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;
constexpr float kInv128 = 1.0f / 128.0f;  // 2^-7, exact

// Unscaled 128-point Sylvester butterfly of the elements x[0], x[stride], ..., x[127 · stride]:
// stages h = 1, 2, ..., 64, each pair (i, i + h) becoming (a + b, a - b).
void butterflies(float* x, int64_t stride) {
  for (int64_t h = 1; h < kBlock; h *= 2) {
    for (int64_t group = 0; group < kBlock; group += 2 * h) {
      for (int64_t i = group; i < group + h; ++i) {
        const float a = x[i * stride];
        const float b = x[(i + h) * stride];
        x[i * stride] = a + b;
        x[(i + h) * stride] = a - b;
      }
    }
  }
}

std::vector<float> half_vector(const Tensor& t) {
  const auto* bits = static_cast<const uint16_t*>(t.raw());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = half_bits_to_float(bits[i]);
  return out;
}

}  // namespace

Tensor exl3_decode_original_ref(const Exl3Weight& w) {
  EXL3_CHECK(w.k > 0 && w.k % kBlock == 0, "k must be a positive multiple of 128, got ", w.k);
  EXL3_CHECK(w.n > 0 && w.n % kBlock == 0, "n must be a positive multiple of 128, got ", w.n);
  EXL3_CHECK(w.bits >= 1 && w.bits <= 8, "bits must be in 1..8, got ", w.bits);
  EXL3_CHECK(w.trellis.defined() && w.trellis.shape() == Shape({w.k / 16, w.n / 16, 16 * w.bits}), "trellis shape ",
             shape_string(w.trellis.shape()), " for k=", w.k, " n=", w.n, " bits=", w.bits);
  EXL3_CHECK(w.suh.defined() && w.suh.dtype() == DType::kF16 && w.suh.shape() == Shape({w.k}), "suh must be F16 [", w.k,
             "]");
  EXL3_CHECK(w.svh.defined() && w.svh.dtype() == DType::kF16 && w.svh.shape() == Shape({w.n}), "svh must be F16 [", w.n,
             "]");

  // 1. Wq in fp32.
  std::vector<float> t = half_vector(exl3_decode_ref(w.trellis, w.bits, w.codebook));
  // 2. Along each row, per 128-block.
  for (int64_t i = 0; i < w.k; ++i) {
    for (int64_t j = 0; j < w.n; j += kBlock) butterflies(t.data() + i * w.n + j, 1);
  }
  // 3. Down each column, per 128-block.
  for (int64_t i = 0; i < w.k; i += kBlock) {
    for (int64_t j = 0; j < w.n; ++j) butterflies(t.data() + i * w.n + j, w.n);
  }
  // 4, 5. Scale and round once.
  const std::vector<float> suh = half_vector(w.suh);
  const std::vector<float> svh = half_vector(w.svh);
  Tensor out = Tensor::zeros(DType::kF16, {w.k, w.n});
  auto* bits = static_cast<uint16_t*>(out.mutable_raw());
  for (int64_t i = 0; i < w.k; ++i) {
    const float row_scale = suh[static_cast<size_t>(i)] * kInv128;
    for (int64_t j = 0; j < w.n; ++j) {
      const float s = row_scale * svh[static_cast<size_t>(j)];
      const float v = t[static_cast<size_t>(i * w.n + j)] * s;
      bits[i * w.n + j] = float_to_half_bits(v);
    }
  }
  return out;
}

}  // namespace exl3
