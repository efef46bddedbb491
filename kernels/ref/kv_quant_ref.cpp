// Reference quantization of one 32-element KV-cache group (exl3-format.md §9): natural-order WHT,
// fp16 scale, midpoint grid, bit planes of widths {8, 4, 2, 1} widest first. All arithmetic fp32.
#include <algorithm>
#include <cmath>

#include "kernels/check.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

constexpr float kInvSqrt32 = 0.17677669529663688f;

// In-place unscaled 32-point Walsh-Hadamard transform, natural (Sylvester) order, stages of
// distance 1, 2, 4, 8, 16 (the order the CUDA warp butterfly uses, so roundings agree).
void wht32(float* x) {
  for (int h = 1; h < 32; h *= 2) {
    for (int i = 0; i < 32; ++i) {
      if ((i & h) != 0) continue;
      const float a = x[i], b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
  }
}

}  // namespace

void kv_quantize_group_ref(const float* group, int bits, uint32_t* words, uint16_t* scale_fp16) {
  EXL3_CHECK(bits >= 2 && bits <= 8, "kv_quantize_group_ref: bits ", bits);
  float w[32];
  std::copy_n(group, 32, w);
  wht32(w);
  float max_abs = 0.0f;
  for (float& x : w) {
    x *= kInvSqrt32;
    max_abs = std::max(max_abs, std::fabs(x));
  }
  const float s = max_abs + 1e-10f;
  *scale_fp16 = float_to_half_bits(s);
  const float inv = 1.0f / s;
  const float m = static_cast<float>(1 << (bits - 1));
  const float top = static_cast<float>((1 << bits) - 1);
  uint32_t q[32];
  for (int e = 0; e < 32; ++e) {
    const float f = std::floor(std::fma(w[e] * inv, m, m));
    q[e] = static_cast<uint32_t>(std::clamp(f, 0.0f, top));
  }
  // Planes: the set bits of `bits` from the highest; the plane of width pw starts at word
  // bits & ~(2pw - 1) (the widths above it) and holds q's bits above the lower planes' widths.
  std::fill_n(words, bits, 0u);
  for (int pw = 8; pw >= 1; pw /= 2) {
    if ((bits & pw) == 0) continue;
    const int base = bits & ~(2 * pw - 1);
    const int shift = bits & (pw - 1);
    const uint32_t mask = (1u << pw) - 1u;
    for (int e = 0; e < 32; ++e) {
      const int off = e * pw;
      words[base + off / 32] |= ((q[e] >> shift) & mask) << (off % 32);
    }
  }
}

void kv_dequantize_group_ref(const uint32_t* words, uint16_t scale_fp16, int bits, float* group) {
  EXL3_CHECK(bits >= 2 && bits <= 8, "kv_dequantize_group_ref: bits ", bits);
  const float m = static_cast<float>(1 << (bits - 1));
  const float factor = half_bits_to_float(scale_fp16) * kInvSqrt32 / m;
  const float mid = m - 0.5f;
  for (int e = 0; e < 32; ++e) {
    uint32_t q = 0;
    for (int pw = 8; pw >= 1; pw /= 2) {
      if ((bits & pw) == 0) continue;
      const int base = bits & ~(2 * pw - 1);
      const int off = e * pw;
      q |= ((words[base + off / 32] >> (off % 32)) & ((1u << pw) - 1u)) << (bits & (pw - 1));
    }
    group[e] = (static_cast<float>(q) - mid) * factor;
  }
  wht32(group);
  for (int e = 0; e < 32; ++e) group[e] = round_to_half(group[e]);
}

}  // namespace exl3
