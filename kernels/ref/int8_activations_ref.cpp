// CPU reference of int8 activations for the few-rows EXL3 matmul (int8_activations_ref.h): simple
// loops that spell out the rounding of every step.
#include "kernels/ref/int8_activations_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/check.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;
constexpr uint32_t kMul1Multiplier = 0x83DCD12Du;
constexpr double kMul1Inv = 0.00676727294921875;  // fp16 0x1EEE
constexpr double kMul1Bias = -10.3828125;         // fp16 0xC931

void check_activations(const Tensor& a) {
  EXL3_CHECK(a.dtype() == DType::kF32 && a.rank() == 2, "activations must be F32 [m, k], got ", dtype_name(a.dtype()),
             " ", shape_string(a.shape()));
  EXL3_CHECK(a.dim(1) > 0 && a.dim(1) % kBlock == 0, "k must be a positive multiple of 128, got ", a.dim(1));
}

}  // namespace

float int8_quantize_block_ref(const float* a, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < kBlock; ++i) {
    finite = finite && std::isfinite(a[i]);
    if (std::isfinite(a[i])) amax = std::max(amax, std::fabs(a[i]));
  }
  if (!finite || amax == 0.0f) {
    for (int64_t i = 0; i < kBlock; ++i) q[i] = 0;
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = 127.0f / amax;
  for (int64_t i = 0; i < kBlock; ++i) {
    const float product = a[i] * inv;
    // std::nearbyint rounds half to even in the default rounding mode.
    const float rounded = std::nearbyint(product);
    q[i] = static_cast<int8_t>(std::clamp(rounded, -127.0f, 127.0f));
  }
  return amax / 127.0f;
}

Int8ActivationsRef int8_quantize_activations_ref(const Tensor& a) {
  check_activations(a);
  const int64_t m = a.dim(0), k = a.dim(1), blocks = k / kBlock;
  Int8ActivationsRef out{Tensor::zeros(DType::kI8, {m, k}), Tensor::zeros(DType::kF32, {m, blocks})};
  const float* src = a.data<float>();
  int8_t* q = out.q.mutable_data<int8_t>();
  float* scales = out.scales.mutable_data<float>();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = r * k + b * kBlock;
      scales[r * blocks + b] = int8_quantize_block_ref(src + at, q + at);
    }
  }
  return out;
}

Tensor int8_dequantize_activations_ref(const Int8ActivationsRef& qa) {
  const int64_t m = qa.q.dim(0), k = qa.q.dim(1), blocks = k / kBlock;
  EXL3_CHECK(qa.scales.shape() == Shape({m, blocks}), "scales ", shape_string(qa.scales.shape()), " for q ",
             shape_string(qa.q.shape()));
  Tensor a = Tensor::zeros(DType::kF32, {m, k});
  const int8_t* q = qa.q.data<int8_t>();
  const float* scales = qa.scales.data<float>();
  float* dst = a.mutable_data<float>();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) dst[r * k + i] = static_cast<float>(q[r * k + i]) * scales[r * blocks + i / kBlock];
  }
  return a;
}

void int8_quantize_dequantize_ref(float* a, int64_t rows, int64_t k) {
  EXL3_CHECK(rows >= 0 && k % kBlock == 0, "int8 quantize-dequantize of ", rows, " rows of ", k);
  int8_t q[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k; b += kBlock) {
      float* block = a + r * k + b;
      const float scale = int8_quantize_block_ref(block, q);
      for (int64_t i = 0; i < kBlock; ++i) block[i] = static_cast<float>(q[i]) * scale;
    }
  }
}

double exl3_mul1_value_ref(uint16_t state) {
  const uint32_t x = static_cast<uint32_t>(state) * kMul1Multiplier;
  const uint32_t byte_sum = (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24);
  return kMul1Inv * (1024.0 + static_cast<double>(byte_sum)) + kMul1Bias;
}

std::vector<double> exl3_gemv_int8_ref(const Tensor& trellis, int bits, const Int8ActivationsRef& qa) {
  const std::vector<uint16_t> states = exl3_decode_states_ref(trellis, bits);
  const int64_t k = trellis.dim(0) * 16, n = trellis.dim(1) * 16, blocks = k / kBlock;
  EXL3_CHECK(qa.q.dtype() == DType::kI8 && qa.q.rank() == 2 && qa.q.dim(1) == k, "q must be I8 [m, ", k, "], got ",
             dtype_name(qa.q.dtype()), " ", shape_string(qa.q.shape()));
  const int64_t m = qa.q.dim(0);
  EXL3_CHECK(qa.scales.dtype() == DType::kF32 && qa.scales.shape() == Shape({m, blocks}), "scales must be F32 [", m,
             ", ", blocks, "], got ", shape_string(qa.scales.shape()));
  const int8_t* q = qa.q.data<int8_t>();
  const float* scales = qa.scales.data<float>();
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double total = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {
        double block_sum = 0.0;
        for (int64_t i = b * kBlock; i < (b + 1) * kBlock; ++i) {
          block_sum += static_cast<double>(q[r * k + i]) * exl3_mul1_value_ref(states[static_cast<size_t>(i * n + j)]);
        }
        total += static_cast<double>(scales[r * blocks + b]) * block_sum;
      }
      c[static_cast<size_t>(r * n + j)] = total;
    }
  }
  return c;
}

std::vector<double> exl3_gemv_int8_ref(const Tensor& trellis, int bits, const Tensor& a) {
  return exl3_gemv_int8_ref(trellis, bits, int8_quantize_activations_ref(a));
}

}  // namespace exl3
