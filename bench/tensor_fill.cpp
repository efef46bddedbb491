// Chunk fillers for the synthetic tensor kinds (see tensor_fill.h).
#include "bench/tensor_fill.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "kernels/check.h"
#include "kernels/fp16.h"

namespace exl3 {
namespace {

uint64_t chunk_state(uint64_t seed, uint64_t stream, uint64_t chunk) {
  uint64_t s = seed ^ 0x5DEECE66Dull;
  uint64_t a = splitmix64(s) ^ stream;
  uint64_t b = splitmix64(a) ^ chunk;
  return splitmix64(b);
}

void fill_random_bits(uint64_t state, uint8_t* dst, size_t size) {
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t r = splitmix64(state);
    std::memcpy(dst + i, &r, 8);
  }
  if (i < size) {
    const uint64_t r = splitmix64(state);
    std::memcpy(dst + i, &r, size - i);
  }
}

// U[0.5, 1.5) has mean square 13/12; dividing by its root makes the RMS of |value| equal `scale`.
void fill_signed_scales(const FillSpec& spec, uint64_t state, uint64_t first, uint8_t* dst, size_t count) {
  const double norm = spec.scale / std::sqrt(13.0 / 12.0);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = splitmix64(state);
    uint16_t bits = 0;
    if (static_cast<int64_t>(first + i) < spec.active) {
      const double u = 0.5 + static_cast<double>(r >> 11) * 0x1.0p-53;
      bits = double_to_half_bits((r & 1) ? -u * norm : u * norm);
    }
    std::memcpy(dst + 2 * i, &bits, 2);
  }
}

void fill_table16(const std::vector<uint16_t>& table, uint64_t state, uint8_t* dst, size_t count) {
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const uint64_t r = splitmix64(state);
    const uint16_t v[4] = {table[r & 0xFFFF], table[(r >> 16) & 0xFFFF], table[(r >> 32) & 0xFFFF], table[r >> 48]};
    std::memcpy(dst + 2 * i, v, 8);
  }
  for (uint64_t r = splitmix64(state); i < count; ++i, r >>= 16) std::memcpy(dst + 2 * i, &table[r & 0xFFFF], 2);
}

}  // namespace

void fill_chunk(const FillSpec& spec, uint64_t seed, uint64_t chunk_index, uint8_t* dst, size_t size) {
  EXL3_CHECK(size <= kFillChunkBytes, "fill_chunk: ", size, " bytes exceed one chunk");
  const uint64_t state = chunk_state(seed, spec.stream, chunk_index);
  const uint64_t first16 = chunk_index * kFillChunkBytes / 2;
  switch (spec.kind) {
    case FillKind::kRandomBits:
      fill_random_bits(state, dst, size);
      return;
    case FillKind::kSignedScales:
      EXL3_CHECK(size % 2 == 0, "fill_chunk: odd size for a 16-bit tensor");
      fill_signed_scales(spec, state, first16, dst, size / 2);
      return;
    case FillKind::kTable16:
      EXL3_CHECK(size % 2 == 0 && spec.table && spec.table->size() == 65536, "fill_chunk: bad table fill");
      fill_table16(*spec.table, state, dst, size / 2);
      return;
    case FillKind::kConstant16:
      EXL3_CHECK(size % 2 == 0, "fill_chunk: odd size for a 16-bit tensor");
      for (size_t i = 0; i < size; i += 2) std::memcpy(dst + i, &spec.constant, 2);
      return;
    case FillKind::kInt32:
      EXL3_CHECK(size % 4 == 0, "fill_chunk: size not a multiple of 4 for an int32 tensor");
      for (size_t i = 0; i < size; i += 4) std::memcpy(dst + i, &spec.value, 4);
      return;
  }
}

std::shared_ptr<const std::vector<uint16_t>> gaussian_table16(double std, bool bf16) {
  auto table = std::make_shared<std::vector<uint16_t>>(65536);
  uint64_t state = 0x243F6A8885A308D3ull;  // fixed: the table is part of the format of our output
  for (size_t i = 0; i < table->size(); i += 2) {
    // Box-Muller: two independent normals from two uniforms in (0, 1].
    const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)) * std;
    const double a = 2.0 * std::numbers::pi * u2;
    for (int j = 0; j < 2; ++j) {
      const double v = j == 0 ? r * std::cos(a) : r * std::sin(a);
      (*table)[i + j] = bf16 ? float_to_bf16_bits(static_cast<float>(v)) : double_to_half_bits(v);
    }
  }
  return table;
}

}  // namespace exl3
