// CPU backend quantized KV-cache rows (exl3-format.md §9): 32-element groups through the
// natural-order WHT, fp16 scale, midpoint grid, bit planes {8, 4, 2, 1} widest first. The same fp32
// operations in the same order as kv_quantize_group_ref / kv_dequantize_group_ref, so bit-equal.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp16.h"

namespace exl3 {
namespace {

constexpr float kInvSqrt32 = 0.17677669529663688f;

void butterfly32(float* x) {
  for (int h = 1; h < 32; h *= 2) {
    for (int base = 0; base < 32; base += 2 * h) {
      for (int i = base; i < base + h; ++i) {
        const float a = x[i], b = x[i + h];
        x[i] = a + b;
        x[i + h] = a - b;
      }
    }
  }
}

// The planes of a width: count, and per plane its width, first word and shift of q.
struct Planes {
  int count = 0;
  int width[4], base[4], shift[4];
  explicit Planes(int bits) {
    for (int pw = 8; pw >= 1; pw /= 2) {
      if ((bits & pw) == 0) continue;
      width[count] = pw;
      base[count] = bits & ~(2 * pw - 1);
      shift[count] = bits & (pw - 1);
      ++count;
    }
  }
};

}  // namespace

void kv_quantize_row_cpu(const float* row, int64_t groups, int bits, uint32_t* words, uint16_t* scales) {
  const Planes planes(bits);
  const float m = static_cast<float>(1 << (bits - 1));
  const float top = static_cast<float>((1 << bits) - 1);
  for (int64_t g = 0; g < groups; ++g) {
    float w[32];
    std::copy_n(row + g * 32, 32, w);
    butterfly32(w);
    float max_abs = 0.0f;
    for (float& x : w) {
      x *= kInvSqrt32;
      max_abs = std::max(max_abs, std::fabs(x));
    }
    const float s = max_abs + 1e-10f;
    scales[g] = float_to_half_bits(s);
    const float inv = 1.0f / s;
    uint32_t* out = words + g * bits;
    std::fill_n(out, bits, 0u);
    for (int e = 0; e < 32; ++e) {
      const auto q = static_cast<uint32_t>(std::clamp(std::floor(std::fma(w[e] * inv, m, m)), 0.0f, top));
      for (int i = 0; i < planes.count; ++i) {
        const int off = e * planes.width[i];
        out[planes.base[i] + off / 32] |= ((q >> planes.shift[i]) & ((1u << planes.width[i]) - 1u)) << (off % 32);
      }
    }
  }
}

void kv_dequantize_cpu(const uint32_t* words, const uint16_t* scales, int bits, int64_t groups, float* out) {
  const Planes planes(bits);
  const float m = static_cast<float>(1 << (bits - 1));
  const float mid = m - 0.5f;
  for (int64_t g = 0; g < groups; ++g) {
    const uint32_t* in = words + g * bits;
    const float factor = half_bits_to_float(scales[g]) * kInvSqrt32 / m;
    float* x = out + g * 32;
    for (int e = 0; e < 32; ++e) {
      uint32_t q = 0;
      for (int i = 0; i < planes.count; ++i) {
        const int off = e * planes.width[i];
        q |= ((in[planes.base[i] + off / 32] >> (off % 32)) & ((1u << planes.width[i]) - 1u)) << planes.shift[i];
      }
      x[e] = (static_cast<float>(q) - mid) * factor;
    }
    butterfly32(x);
    for (int e = 0; e < 32; ++e) x[e] = round_to_half(x[e]);
  }
}

}  // namespace exl3
