// Device-side decode of one EXL3 16x16 trellis tile by one warp, straight into the B fragments of
// mma.m16n8k16 (exl3-format.md §4.2–§4.4, §5), shared by the decode and GEMM kernels; plus the one
// list of (bits, codebook) pairs every EXL3 kernel is instantiated from.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/ops.h"

namespace exl3::trellis {

constexpr int kTileSize = 16;
constexpr int kTilePositions = kTileSize * kTileSize;  // 256 states per tile
constexpr int kPositionsPerLane = 8;                   // lane l owns positions 8l .. 8l+7

// A tile is 8·bits little-endian uint32 stream words (§4.2): reading the stored int16 pairs as one
// uint32 undoes the half swap, and word m holds stream bits 32m .. 32m+31, the first at the MSB.
constexpr int tile_words(int bits) { return 8 * bits; }

// The stream words a lane needs: its 8 states span the 7·bits + 16 stream bits ending with symbol
// 8l+7, which start at bit `shift` of word0 and run on through word1 (and word2 when bits > 4:
// shift + 7·bits + 16 never exceeds 64 for bits <= 4 nor 96 for bits <= 8). Circular: tail-biting.
struct LaneWindow {
  int word0 = 0;
  int word1 = 0;
  int word2 = 0;
  uint32_t shift = 0;
};

template <int kBits>
constexpr int window_words() {
  return kBits <= 4 ? 2 : 3;
}

template <int kBits>
__device__ __forceinline__ LaneWindow lane_window(int lane) {
  constexpr int kStreamBits = kTilePositions * kBits;
  constexpr int kWords = tile_words(kBits);
  // state[p] = the 16 stream bits ending at (p + 1)·bits (§4.3); the lane's first is p = 8·lane.
  const int start = (kPositionsPerLane * lane * kBits + kBits - 16 + kStreamBits) % kStreamBits;
  LaneWindow w;
  w.word0 = start / 32;
  w.word1 = (w.word0 + 1) % kWords;
  w.word2 = (w.word0 + 2) % kWords;
  w.shift = static_cast<uint32_t>(start % 32);
  return w;
}

// The lane's 8 states (positions 8l .. 8l+7) from its window words w[0..window_words-1]. The
// window is first shifted so that it starts at a word boundary; after that every state sits at a
// compile-time bit offset j·bits.
// When 8·bits is a multiple of 32 (bits 4 and 8) every lane's window starts at the same bit of
// its first word, so the shift is a compile-time constant and the extraction below folds into
// byte permutes.
template <int kBits>
constexpr bool shift_is_uniform() {
  return (kPositionsPerLane * kBits) % 32 == 0;
}

template <int kBits>
constexpr uint32_t uniform_shift() {
  return static_cast<uint32_t>(((kBits - 16) % 32 + 32) % 32);
}

// Bits 23..8 of v: a state one byte below the top of a word.
__device__ __forceinline__ uint32_t middle16(uint32_t v) { return __byte_perm(v, 0u, 0x4421); }

template <int kBits>
__device__ __forceinline__ void lane_states(const uint32_t (&w)[3], uint32_t lane_shift,
                                            uint32_t (&states)[kPositionsPerLane]) {
  if constexpr (kBits == 4) {
    // State j spans stream bits 20 + 4j .. 35 + 4j of (w0, w1): every one is the top, the middle
    // or the bottom 16 bits of w1 or of a word funnel-shifted out of (w0, w1) (11 operations).
    const uint32_t at16 = __funnelshift_l(w[1], w[0], 16);
    const uint32_t at20 = __funnelshift_l(w[1], w[0], 20);
    const uint32_t at28 = __funnelshift_l(w[1], w[0], 28);
    states[0] = at20 >> 16;
    states[1] = middle16(at16);
    states[2] = middle16(at20);
    states[3] = w[1] >> 16;
    states[4] = at20 & 0xFFFFu;
    states[5] = middle16(w[1]);
    states[6] = at28 & 0xFFFFu;
    states[7] = w[1] & 0xFFFFu;
    return;
  } else if constexpr (kBits == 8) {
    // State j spans stream bits 24 + 8j .. 39 + 8j of (w0, w1, w2): byte-aligned (10 operations).
    const uint32_t at16 = __funnelshift_l(w[1], w[0], 16);
    const uint32_t at48 = __funnelshift_l(w[2], w[1], 16);
    states[0] = middle16(at16);
    states[1] = w[1] >> 16;
    states[2] = middle16(w[1]);
    states[3] = w[1] & 0xFFFFu;
    states[4] = middle16(at48);
    states[5] = w[2] >> 16;
    states[6] = middle16(w[2]);
    states[7] = w[2] & 0xFFFFu;
    return;
  }
  const uint32_t shift = shift_is_uniform<kBits>() ? uniform_shift<kBits>() : lane_shift;
  uint32_t win[3];
  win[0] = __funnelshift_l(w[1], w[0], shift);
  if constexpr (kBits <= 4) {
    win[1] = w[1] << shift;
    win[2] = 0;
  } else {
    win[1] = __funnelshift_l(w[2], w[1], shift);
    win[2] = w[2] << shift;
  }
#pragma unroll
  for (int j = 0; j < kPositionsPerLane; ++j) {
    const int word = j * kBits / 32;
    const int bit = j * kBits % 32;
    uint32_t v;
    if (bit + 16 <= 32) {
      v = win[word] >> (16 - bit);
    } else {
      v = __funnelshift_l(win[word + 1], win[word], bit) >> 16;
    }
    states[j] = v & 0xFFFFu;
  }
}

// fp16x2 arithmetic with explicit round-to-nearest (so the compiler never fuses or reorders it).
__device__ __forceinline__ uint32_t hadd2_rn(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

__device__ __forceinline__ uint32_t hfma2_rn(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// MUL1 codes h = 1024 + byte sum of s·0x83DCD12D (§5) of two states as one fp16x2 word, before
// the affine map value = h·KINV + KBIAS: exact integers in fp16 (0x6400 + sum, below 2048).
__device__ __forceinline__ uint32_t mul1_codes(uint32_t s0, uint32_t s1) {
  const uint32_t h0 = __dp4a(s0 * 0x83DCD12Du, 0x01010101u, 0x6400u);
  const uint32_t h1 = __dp4a(s1 * 0x83DCD12Du, 0x01010101u, 0x6400u);
  return __byte_perm(h0, h1, 0x5410);
}

// (x & mask) ^ bits in one LOP3 (the compiler would otherwise spend two on the two constants).
__device__ __forceinline__ uint32_t and_xor(uint32_t x, uint32_t mask, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(x), "r"(mask), "r"(bits));
  return d;
}

// Codebook values (§5) of two states as one fp16x2 word: value(s0) in the low half. Bit-exact with
// exl3_codebook_ref: the 3INST/MCG finisher adds the two masked halves with one fp16 addition; MUL1
// builds h = 1024 + byte sum directly as fp16 bits (0x6400 + sum, exact below 2048) and takes
// h·KINV + KBIAS with one fused fp16 rounding.
template <Codebook kCodebook>
__device__ __forceinline__ uint32_t decode_pair(uint32_t s0, uint32_t s1) {
  if constexpr (kCodebook == Codebook::kMul1) {
    constexpr uint32_t kInv2 = 0x1EEE1EEEu;   // KINV = 0.00676727294921875 in both halves
    constexpr uint32_t kBias2 = 0xC931C931u;  // KBIAS = -10.3828125 in both halves
    return hfma2_rn(mul1_codes(s0, s1), kInv2, kBias2);
  } else {
    uint32_t x0;
    uint32_t x1;
    if constexpr (kCodebook == Codebook::k3Inst) {
      x0 = s0 * 89226354u + 64248484u;
      x1 = s1 * 89226354u + 64248484u;
    } else {
      x0 = s0 * 0xCBAC1FEDu;
      x1 = s1 * 0xCBAC1FEDu;
    }
    x0 = and_xor(x0, 0x8FFF8FFFu, 0x3B603B60u);
    x1 = and_xor(x1, 0x8FFF8FFFu, 0x3B603B60u);
    // Low halves of both words, then high halves: lo + hi per state.
    return hadd2_rn(__byte_perm(x0, x1, 0x5410), __byte_perm(x0, x1, 0x7632));
  }
}

// The 3INST/MCG codebooks before their final addition: one state's value is the sum of the two
// fp16 halves of the returned word (§5). A GEMV multiplies both halves by the same activation
// instead of adding them first (w·x = lo·x + hi·x), which saves the pairing and the addition.
template <Codebook kCodebook>
__device__ __forceinline__ uint32_t decode_halves(uint32_t s) {
  static_assert(kCodebook != Codebook::kMul1, "MUL1 values are not a sum of two halves");
  const uint32_t x = kCodebook == Codebook::k3Inst ? s * 89226354u + 64248484u : s * 0xCBAC1FEDu;
  return and_xor(x, 0x8FFF8FFFu, 0x3B603B60u);
}

// One lane's share of a decoded tile as mma.m16n8k16 B fragments (§4.4): b[0], b[1] are the
// {k rows 2t, 2t+1} and {2t+8, 2t+9} registers of output column l/4 (first n8 half), b[2], b[3]
// the same rows of column l/4 + 8 (second n8 half), t = l % 4. Register b[i] holds positions
// 8l + 2i (low half) and 8l + 2i + 1 (high half).
template <int kBits, Codebook kCodebook>
__device__ __forceinline__ void decode_lane(const uint32_t (&w)[3], uint32_t shift,
                                            uint32_t (&b)[4]) {
  uint32_t s[kPositionsPerLane];
  lane_states<kBits>(w, shift, s);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = decode_pair<kCodebook>(s[2 * i], s[2 * i + 1]);
}

// Tile element of position p (§4.4): row = input feature within the tile, col = output feature.
__host__ __device__ constexpr int position_row(int p) {
  const int lane = p / kPositionsPerLane;
  const int j = p % kPositionsPerLane;
  return 2 * (lane % 4) + (j & 1) + ((j & 2) != 0 ? 8 : 0);
}

__host__ __device__ constexpr int position_col(int p) {
  return p / kPositionsPerLane / 4 + (p % kPositionsPerLane >= 4 ? 8 : 0);
}

// ---- The one list of instantiated formats ----------------------------------------------------

constexpr int kBitsList[] = {1, 2, 3, 4, 5, 6, 7, 8};
constexpr Codebook kCodebookList[] = {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1};
constexpr int kNumBits = static_cast<int>(std::size(kBitsList));
constexpr int kNumCodebooks = static_cast<int>(std::size(kCodebookList));

namespace internal {

template <typename F, std::size_t... kIndex>
bool dispatch_format(int bits, Codebook codebook, F& f, std::index_sequence<kIndex...>) {
  return ((bits == kBitsList[kIndex / kNumCodebooks] &&
           codebook == kCodebookList[kIndex % kNumCodebooks] &&
           (f.template operator()<kBitsList[kIndex / kNumCodebooks],
                                  kCodebookList[kIndex % kNumCodebooks]>(),
            true)) ||
          ...);
}

}  // namespace internal

// Calls f.template operator()<kBits, kCodebook>() for the runtime pair; every pair of kBitsList ×
// kCodebookList is instantiated once. Returns false (calling nothing) for a pair not in the list.
template <typename F>
bool dispatch_format(int bits, Codebook codebook, F&& f) {
  return internal::dispatch_format(bits, codebook, f,
                                   std::make_index_sequence<kNumBits * kNumCodebooks>());
}

}  // namespace exl3::trellis
