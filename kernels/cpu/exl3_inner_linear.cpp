// CPU backend EXL3 linear through the decoded inner weight Wq (exl3-format.md §3), used where int8
// activations may apply (kernels/int8_activations.h): x ⊙ suh and the input Hadamard transform,
// with int8 activations rounded to fp16 as the GPU's GEMM input is and quantized, dequantized per
// 128-block by the reference (the spec, kernels/ref/int8_activations_ref.h); then Wq through BLAS
// and the output transform.
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/ref/int8_activations_ref.h"

namespace exl3 {
namespace {

constexpr float kInvSqrt128 = 0.08838834764831845f;

}  // namespace

void exl3_inner_linear_cpu(const float* x, int64_t m, int64_t in_features, const float* wq, int64_t k, int64_t n,
                           const uint16_t* suh, const uint16_t* svh, const float* bias, int64_t out_features,
                           bool int8_activations, float* y) {
  EXL3_CHECK(m > 0 && in_features > 0 && in_features <= k && out_features > 0 && out_features <= n && k % 128 == 0 &&
                 n % 128 == 0,
             "EXL3 inner linear: ", m, " rows, ", in_features, "x", out_features, " in a ", k, "x", n, " weight");
  std::vector<float> a(static_cast<size_t>(m * k), 0.0f);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < in_features; ++i) a[r * k + i] = x[r * in_features + i] * half_bits_to_float(suh[i]);
  }
  if (int8_activations) {
    for (float& v : a) v = round_to_half(v);
  }
  wht128_rows_cpu(a.data(), m, k);
  for (float& v : a) v *= kInvSqrt128;
  if (int8_activations) {
    for (float& v : a) v = round_to_half(v);
    int8_quantize_dequantize_ref(a.data(), m, k);
  }

  std::vector<float> c(static_cast<size_t>(m * n));
  matmul_cpu(a.data(), wq, c.data(), m, k, n);
  wht128_rows_cpu(c.data(), m, n);
  for (int64_t r = 0; r < m; ++r) {
    const float* crow = c.data() + r * n;
    float* yrow = y + r * out_features;
    for (int64_t j = 0; j < out_features; ++j) {
      yrow[j] = crow[j] * kInvSqrt128 * half_bits_to_float(svh[j]);
      if (bias != nullptr) yrow[j] += bias[j];
    }
  }
}

}  // namespace exl3
