// IEEE binary16 and bfloat16 conversions on the host, all round-to-nearest-even. The EXL3
// codebooks need a single rounding from double (not via float), hence double_to_half_bits.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace exl3 {

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) {
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Rounds a double to the nearest binary16 (ties to even), with overflow to infinity.
inline uint16_t double_to_half_bits(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  double a = std::fabs(v);
  if (std::isnan(v)) return 0x7E00u;
  if (a == 0.0) return sign;
  if (a >= 65520.0) return sign | 0x7C00u;  // rounds past the largest finite half (65504)
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  // Unit in the last place: normal halves have 11 significant bits; subnormals step by 2^-24.
  const int ulp_exp = std::max(e - 11, -24);
  const double scaled = std::ldexp(a, -ulp_exp);
  double r = std::nearbyint(scaled);  // default rounding mode: ties to even
  const double q = std::ldexp(r, ulp_exp);
  // Re-derive the bit pattern from the rounded value.
  if (q < std::ldexp(1.0, -14)) {
    return sign | static_cast<uint16_t>(std::ldexp(q, 24));
  }
  int qe;
  const double qf = std::frexp(q, &qe);  // q = qf * 2^qe
  const uint32_t exp_field = static_cast<uint32_t>(qe - 1 + 15);
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(qf, 11)) - 1024u;
  return sign | static_cast<uint16_t>((exp_field << 10) | mant);
}

inline uint16_t float_to_half_bits(float v) { return double_to_half_bits(static_cast<double>(v)); }

// Rounds a float to the nearest binary16 value and returns it as a float.
inline float round_to_half(float v) { return half_bits_to_float(float_to_half_bits(v)); }

inline float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bf16_bits(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return 0x7FC0u;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace exl3
