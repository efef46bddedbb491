// CPU reference of the three EXL3 procedural codebooks (exl3-format.md §5): a 16-bit trellis
// state maps to one fp16 value, bit-exact with ExLlamaV3. Every intermediate sum is exact in
// double, so one double -> fp16 rounding reproduces the GPU's single fp16 rounding.
#include <cstdint>

#include "kernels/check.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

constexpr uint32_t k3InstMultiplier = 89226354u;  // 0x05517C72
constexpr uint32_t k3InstAddend = 64248484u;      // 0x03D45AA4
constexpr uint32_t kMcgMultiplier = 0xCBAC1FEDu;
constexpr uint32_t kMul1Multiplier = 0x83DCD12Du;
constexpr uint16_t kMul1InvBits = 0x1EEE;   // fp16 0.00676727294921875
constexpr uint16_t kMul1BiasBits = 0xC931;  // fp16 -10.3828125
constexpr double kMul1Accumulator = 1024.0; // fp16 0x6400

// The "two-half" finisher shared by 3INST and MCG: keep the sign and low 12 bits of each 16-bit
// half, force the exponent field to 0b011xx, and add the two halves as fp16 numbers.
uint16_t two_half_finish(uint32_t x) {
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  const double lo = half_bits_to_float(static_cast<uint16_t>(x & 0xFFFFu));
  const double hi = half_bits_to_float(static_cast<uint16_t>(x >> 16));
  return double_to_half_bits(lo + hi);
}

uint16_t mul1_decode(uint32_t state) {
  const uint32_t x = state * kMul1Multiplier;
  const uint32_t byte_sum = (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24);
  const double h = kMul1Accumulator + static_cast<double>(byte_sum);
  const double inv = half_bits_to_float(kMul1InvBits);
  const double bias = half_bits_to_float(kMul1BiasBits);
  return double_to_half_bits(h * inv + bias);
}

}  // namespace

uint16_t exl3_codebook_ref(uint16_t state, Codebook codebook) {
  const uint32_t s = state;
  switch (codebook) {
    case Codebook::k3Inst:
      return two_half_finish(s * k3InstMultiplier + k3InstAddend);
    case Codebook::kMcg:
      return two_half_finish(s * kMcgMultiplier);
    case Codebook::kMul1:
      return mul1_decode(s);
  }
  EXL3_CHECK(false, "unknown codebook ", static_cast<int>(codebook));
  return 0;
}

}  // namespace exl3
