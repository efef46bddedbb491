// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): the
// counter-based RNG of the sampler. A draw is a pure function of (seed, position, stream), so every
// rank, the CPU reference and the CUDA kernel draw the same number with no shared state. Plain
// constexpr C++ with no library calls, so .cu files can use it (nvcc --expt-relaxed-constexpr).
#pragma once

#include <cstdint>

namespace exl3 {

struct PhiloxCounter {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t k[2];
};

// Round multipliers and the Weyl sequence that bumps the key between rounds.
inline constexpr uint32_t kPhiloxMul0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxWeyl1 = 0xBB67AE85u;
inline constexpr int kPhiloxRounds = 10;

constexpr PhiloxCounter philox_round(PhiloxCounter c, PhiloxKey key) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxMul0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxMul1) * c.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
  const uint32_t lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
  const uint32_t lo1 = static_cast<uint32_t>(p1);
  return PhiloxCounter{{hi1 ^ c.v[1] ^ key.k[0], lo1, hi0 ^ c.v[3] ^ key.k[1], lo0}};
}

// The 128-bit block cipher: ten rounds, the key bumped by the Weyl constants between rounds.
constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    if (round > 0) {
      key.k[0] += kPhiloxWeyl0;
      key.k[1] += kPhiloxWeyl1;
    }
    counter = philox_round(counter, key);
  }
  return counter;
}

// The sampler's draw: key = seed (low word first), counter = (position low, position high,
// stream low, stream high); the top 24 bits of output word 0 scaled by 2^-24, a float in [0, 1)
// that is exact (24 bits fit the float significand) and never rounds up to 1.
constexpr float philox_uniform(uint64_t seed, uint64_t position, uint64_t stream) {
  const PhiloxKey key{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const PhiloxCounter counter{{static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  const uint32_t bits = philox4x32_10(counter, key).v[0] >> 8;
  return static_cast<float>(bits) * (1.0f / 16777216.0f);
}

}  // namespace exl3
