// Deterministic random contents for synthetic model tensors. Every tensor is cut into fixed
// chunks of kFillChunkBytes; chunk c of the tensor with stream id s draws from a counter-based
// generator seeded by (seed, s, c), so the bytes do not depend on how many threads write them or
// in which order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace exl3 {

// Bytes per fill chunk (a multiple of 8): large enough that pwrite calls are efficient, small
// enough that 16 threads keep only 128 MiB of buffers.
inline constexpr uint64_t kFillChunkBytes = 8ull << 20;

enum class FillKind {
  kRandomBits,    // uniformly random bytes (EXL3 trellis: every bit pattern decodes to a codebook value)
  kSignedScales,  // fp16: random sign x scale x U[0.5, 1.5) / rms(U) (suh, svh); zero from `active` on
  kTable16,       // 16-bit values drawn uniformly from a 65536-entry table (fp16/bf16 Gaussian)
  kConstant16,    // every 16-bit element = `constant` (norm weights 1.0)
  kInt32,         // one or more int32 = `value` (codebook marker scalars)
};

struct FillSpec {
  FillKind kind = FillKind::kRandomBits;
  uint64_t stream = 0;  // distinct per tensor
  double scale = 1.0;   // kSignedScales: RMS of the non-zero elements
  int64_t active = 0;   // kSignedScales: elements [active, numel) are zero (padding)
  std::shared_ptr<const std::vector<uint16_t>> table;  // kTable16
  uint16_t constant = 0;                                 // kConstant16
  int32_t value = 0;                                     // kInt32
};

inline FillSpec random_bits_fill() { return FillSpec{}; }
inline FillSpec signed_scales_fill(double scale, int64_t active) {
  FillSpec f;
  f.kind = FillKind::kSignedScales;
  f.scale = scale;
  f.active = active;
  return f;
}
inline FillSpec table16_fill(std::shared_ptr<const std::vector<uint16_t>> table) {
  FillSpec f;
  f.kind = FillKind::kTable16;
  f.table = std::move(table);
  return f;
}
inline FillSpec constant16_fill(uint16_t constant) {
  FillSpec f;
  f.kind = FillKind::kConstant16;
  f.constant = constant;
  return f;
}
inline FillSpec int32_fill(int32_t value) {
  FillSpec f;
  f.kind = FillKind::kInt32;
  f.value = value;
  return f;
}

// Fills `size` bytes that start `chunk_index * kFillChunkBytes` bytes into the tensor. `size` is
// at most kFillChunkBytes and a multiple of the element size.
void fill_chunk(const FillSpec& spec, uint64_t seed, uint64_t chunk_index, uint8_t* dst, size_t size);

// 65536 samples of N(0, std^2) rounded to fp16 (bf16 = false) or bf16, from a fixed generator.
std::shared_ptr<const std::vector<uint16_t>> gaussian_table16(double std, bool bf16);

// splitmix64: one step of the counter-based generator (also used to derive stream seeds).
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace exl3
