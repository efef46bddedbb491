// CPU backend EXL3 weight expansion at load: the trellis is decoded through a 65536-entry table of
// the tile's codebook (fp32 arithmetic that is exact, so one rounding to fp16 as on the GPU), then
// the represented weight W = diag(suh) · BD(H) · Wq · BD(H) · diag(svh) is formed in fp32
// (exl3-format.md §3–§5). The CPU backend multiplies with W through BLAS afterwards (or, for int8
// activations, with the decoded Wq itself: exl3_int8_linear.cpp).
#include <array>
#include <cmath>
#include <mutex>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp16.h"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;
constexpr float kInvSqrt128 = 0.08838834764831845f;

// 3INST/MCG finisher: both masked halves lie in [0.125, 2) with 11-bit significands, so their fp32
// sum is exact and float_to_half_bits rounds once.
uint16_t two_halves(uint32_t x) {
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  return float_to_half_bits(half_bits_to_float(static_cast<uint16_t>(x & 0xFFFFu)) +
                            half_bits_to_float(static_cast<uint16_t>(x >> 16)));
}

uint16_t codebook_value(uint32_t s, Codebook cb) {
  switch (cb) {
    case Codebook::k3Inst: return two_halves(s * 89226354u + 64248484u);
    case Codebook::kMcg: return two_halves(s * 0xCBAC1FEDu);
    case Codebook::kMul1: {
      const uint32_t x = s * 0x83DCD12Du;
      const float h = 1024.0f + static_cast<float>((x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24));
      return float_to_half_bits(std::fma(h, half_bits_to_float(0x1EEE), half_bits_to_float(0xC931)));
    }
  }
  EXL3_CHECK(false, "unknown codebook ", static_cast<int>(cb));
  return 0;
}

const std::vector<float>& codebook_table(Codebook cb) {
  static std::array<std::vector<float>, 3> tables;
  static std::once_flag once[3];
  const int i = static_cast<int>(cb);
  std::call_once(once[i], [&] {
    tables[i].resize(65536);
    for (uint32_t s = 0; s < 65536; ++s) tables[i][s] = half_bits_to_float(codebook_value(s, cb));
  });
  return tables[i];
}

// Unnormalised WHT down the columns within each 128-row block (rows are the butterfly elements).
void wht_columns(float* m, int64_t rows, int64_t cols) {
  for (int64_t b = 0; b < rows; b += kBlock) {
    for (int64_t h = 1; h < kBlock; h *= 2) {
      for (int64_t g = b; g < b + kBlock; g += 2 * h) {
        for (int64_t i = g; i < g + h; ++i) {
          float* x = m + i * cols;
          float* y = m + (i + h) * cols;
          for (int64_t j = 0; j < cols; ++j) {
            const float a = x[j], c = y[j];
            x[j] = a + c;
            y[j] = a - c;
          }
        }
      }
    }
  }
}

}  // namespace

void wht128_rows_cpu(float* m, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols; b += kBlock) {
      float* v = m + r * cols + b;
      for (int64_t h = 1; h < kBlock; h *= 2) {
        for (int64_t g = 0; g < kBlock; g += 2 * h) {
          for (int64_t i = g; i < g + h; ++i) {
            const float a = v[i], c = v[i + h];
            v[i] = a + c;
            v[i + h] = a - c;
          }
        }
      }
    }
  }
}

Tensor exl3_decode_inner_cpu(const Exl3Weight& w) {
  EXL3_CHECK(w.k > 0 && w.k % kBlock == 0 && w.n > 0 && w.n % kBlock == 0 && w.bits >= 1 && w.bits <= 8,
             "EXL3 weight k=", w.k, " n=", w.n, " bits=", w.bits);
  EXL3_CHECK(w.trellis.shape() == Shape({w.k / 16, w.n / 16, 16 * w.bits}), "trellis ",
             shape_string(w.trellis.shape()));
  const std::vector<float>& table = codebook_table(w.codebook);
  Tensor out = Tensor::zeros(DType::kF32, {w.k, w.n});
  float* m = out.mutable_data<float>();
  const int16_t* trellis = w.trellis.data<int16_t>();
  const int64_t tiles_n = w.n / 16, words = 8 * w.bits, stream_bits = 256 * w.bits;
  std::vector<uint32_t> stream(words);
  for (int64_t tk = 0; tk < w.k / 16; ++tk) {
    for (int64_t tn = 0; tn < tiles_n; ++tn) {
      const int16_t* tile = trellis + (tk * tiles_n + tn) * 16 * w.bits;
      for (int64_t i = 0; i < words; ++i) {
        stream[i] = static_cast<uint16_t>(tile[2 * i]) | (static_cast<uint32_t>(static_cast<uint16_t>(tile[2 * i + 1])) << 16);
      }
      for (int p = 0; p < 256; ++p) {
        // The 16 stream bits ending with symbol p, circular over the tile (§4.3).
        const int64_t start = ((p + 1) * w.bits - 16 + stream_bits) % stream_bits;
        const uint64_t pair = (static_cast<uint64_t>(stream[start / 32]) << 32) | stream[(start / 32 + 1) % words];
        const uint32_t state = static_cast<uint32_t>(pair >> (48 - start % 32)) & 0xFFFFu;
        // Tensor-core order of §4.4.
        const int lane = p / 8, j = p % 8;
        const int row = 2 * (lane % 4) + (j & 1) + ((j & 2) ? 8 : 0);
        const int col = lane / 4 + (j >= 4 ? 8 : 0);
        m[(tk * 16 + row) * w.n + tn * 16 + col] = table[state];
      }
    }
  }
  return out;
}

Tensor exl3_dequantize_cpu(const Exl3Weight& w) {
  Tensor out = exl3_decode_inner_cpu(w);
  float* m = out.mutable_data<float>();
  wht128_rows_cpu(m, w.k, w.n);
  wht_columns(m, w.k, w.n);
  const uint16_t* suh = static_cast<const uint16_t*>(w.suh.raw());
  const uint16_t* svh = static_cast<const uint16_t*>(w.svh.raw());
  std::vector<float> col_scale(w.n);
  for (int64_t j = 0; j < w.n; ++j) col_scale[j] = half_bits_to_float(svh[j]);
  for (int64_t i = 0; i < w.k; ++i) {
    const float row_scale = half_bits_to_float(suh[i]) * kInvSqrt128 * kInvSqrt128;
    float* r = m + i * w.n;
    for (int64_t j = 0; j < w.n; ++j) r[j] *= row_scale * col_scale[j];
  }
  return out;
}

}  // namespace exl3
