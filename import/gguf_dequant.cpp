// Block decoders of the GGUF quantization types (see gguf_dequant.h). Block layouts, all
// little-endian, d/dmin/m are fp16:
//   Q4_0 (32):  d, qs[16]              x[j] = d * ((qs[j%16] >> 4*(j/16)) & 15) - 8)
//   Q4_1 (32):  d, m, qs[16]           x[j] = d * q + m
//   Q5_0 (32):  d, qh u32, qs[16]      q = low nibble as Q4_0 | bit j of qh << 4, minus 16
//   Q5_1 (32):  d, m, qh u32, qs[16]   x = d * q + m
//   Q8_0 (32):  d, int8 qs[32]         x = q * d
//   Q2_K (256): scales[16], qs[64], d, dmin; 16 groups of 16 with 4-bit scale and 4-bit min
//   Q3_K (256): hmask[32], qs[64], scales[12] (16 six-bit scales), d
//   Q4_K (256): d, dmin, scales[12] (8 six-bit scales and mins), qs[128]
//   Q5_K (256): d, dmin, scales[12], qh[32], qs[128]
//   Q6_K (256): ql[128], qh[64], int8 scales[16], d
// Element j of a K-quant block: the bit planes are interleaved in 32-element (Q2/Q3/Q4/Q5) or
// 128-element (Q6) chunks, as the index arithmetic below spells out.
#include "import/gguf_dequant.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/fp16.h"

namespace exl3 {
namespace {

float f16_at(const uint8_t* p) {
  uint16_t h = 0;
  std::memcpy(&h, p, 2);
  return half_bits_to_float(h);
}

void q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 32; ++j) {
    const int q = ((qs[j % 16] >> (4 * (j / 16))) & 15) - 8;
    y[j] = d * static_cast<float>(q);
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 32; ++j) {
    const int q = (qs[j % 16] >> (4 * (j / 16))) & 15;
    y[j] = d * static_cast<float>(q) + m;
  }
}

void q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  uint32_t qh = 0;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 32; ++j) {
    const int q = (((qs[j % 16] >> (4 * (j / 16))) & 15) | (((qh >> j) & 1) << 4)) - 16;
    y[j] = d * static_cast<float>(q);
  }
}

void q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  uint32_t qh = 0;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 32; ++j) {
    const int q = ((qs[j % 16] >> (4 * (j / 16))) & 15) | (((qh >> j) & 1) << 4);
    y[j] = d * static_cast<float>(q) + m;
  }
}

void q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int j = 0; j < 256; ++j) {
    // j = half * 128 + shift * 32 + l: bits 2*shift of byte qs[half * 32 + l].
    const int half = j / 128, shift = (j / 32) % 4, l = j % 32;
    const int q = (qs[half * 32 + l] >> (2 * shift)) & 3;
    const int g = j / 16;
    const float dl = d * static_cast<float>(scales[g] & 15);
    const float ml = dmin * static_cast<float>(scales[g] >> 4);
    y[j] = dl * static_cast<float>(q) - ml;
  }
}

void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = f16_at(b + 108);
  float dl[16];
  for (int i = 0; i < 16; ++i) {
    const int low = (sc[i % 8] >> (4 * (i / 8))) & 15;
    const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    dl[i] = d * static_cast<float>((low | (high << 4)) - 32);
  }
  for (int j = 0; j < 256; ++j) {
    const int half = j / 128, shift = (j / 32) % 4, l = j % 32;
    const int low = (qs[half * 32 + l] >> (2 * shift)) & 3;
    // The high bit is subtracted (as 4) when its mask bit is clear.
    const int hbit = (hmask[l] >> (j / 32)) & 1;
    const int q = low - ((hbit ^ 1) << 2);
    y[j] = dl[j / 16] * static_cast<float>(q);
  }
}

// The 8 six-bit scales and mins of Q4_K/Q5_K from their 12 packed bytes.
void k_scale_min(const uint8_t* s, int sc[8], int mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[4 + j] & 63;
    sc[4 + j] = (s[8 + j] & 15) | ((s[j] >> 2) & 48);
    mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 48);
  }
}

void q4_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  int sc[8], mn[8];
  k_scale_min(b + 4, sc, mn);
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 256; ++j) {
    // j = chunk * 64 + nibble * 32 + l.
    const int chunk = j / 64, nibble = (j / 32) % 2, l = j % 32;
    const int q = (qs[chunk * 32 + l] >> (4 * nibble)) & 15;
    const float ds = d * static_cast<float>(sc[j / 32]);
    const float dm = dmin * static_cast<float>(mn[j / 32]);
    y[j] = ds * static_cast<float>(q) - dm;
  }
}

void q5_k(const uint8_t* b, float* y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  int sc[8], mn[8];
  k_scale_min(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 256; ++j) {
    const int chunk = j / 64, nibble = (j / 32) % 2, l = j % 32;
    const int low = (qs[chunk * 32 + l] >> (4 * nibble)) & 15;
    const int high = (qh[l] >> (j / 32)) & 1;
    const float ds = d * static_cast<float>(sc[j / 32]);
    const float dm = dmin * static_cast<float>(mn[j / 32]);
    y[j] = ds * static_cast<float>(low | (high << 4)) - dm;
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16_at(b + 208);
  for (int j = 0; j < 256; ++j) {
    // Low nibbles: j = half * 128 + nibble * 64 + l (l < 64); high bits: j = half * 128 + shift * 32 + l.
    const int half = j / 128;
    const int low = (ql[half * 64 + j % 64] >> (4 * ((j / 64) % 2))) & 15;
    const int high = (qh[half * 32 + j % 32] >> (2 * ((j / 32) % 4))) & 3;
    const float ds = d * static_cast<float>(scales[j / 16]);
    y[j] = ds * static_cast<float>((low | (high << 4)) - 32);
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return q4_0;
    case GgmlType::kQ4_1: return q4_1;
    case GgmlType::kQ5_0: return q5_0;
    case GgmlType::kQ5_1: return q5_1;
    case GgmlType::kQ8_0: return q8_0;
    case GgmlType::kQ2_K: return q2_k;
    case GgmlType::kQ3_K: return q3_k;
    case GgmlType::kQ4_K: return q4_k;
    case GgmlType::kQ5_K: return q5_k;
    case GgmlType::kQ6_K: return q6_k;
    default: return nullptr;
  }
}

}  // namespace

bool gguf_dequant_supported(uint32_t type) {
  const GgmlType t = static_cast<GgmlType>(type);
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16 || block_fn(t) != nullptr;
}

absl::Status dequantize_gguf(uint32_t type, const uint8_t* src, uint64_t src_bytes, float* dst, int64_t n) {
  const auto traits = ggml_type_traits(type);
  if (!traits || !gguf_dequant_supported(type)) {
    return absl::UnimplementedError(absl::StrCat("type ", ggml_type_name(type), " is not supported by exl3-import"));
  }
  if (n < 0 || n % traits->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(n, " elements are not whole ", traits->name, " blocks of ",
                                                   traits->block_size));
  }
  const uint64_t blocks = static_cast<uint64_t>(n) / traits->block_size;
  if (src_bytes / traits->block_bytes != blocks || src_bytes % traits->block_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(src_bytes, " bytes do not hold ", blocks, " ", traits->name,
                                                   " blocks of ", traits->block_bytes, " bytes"));
  }
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(dst, src, src_bytes);
      return absl::OkStatus();
    case GgmlType::kF16:
      for (int64_t k = 0; k < n; ++k) dst[k] = f16_at(src + 2 * k);
      return absl::OkStatus();
    case GgmlType::kBF16:
      for (int64_t k = 0; k < n; ++k) {
        uint16_t h = 0;
        std::memcpy(&h, src + 2 * k, 2);
        dst[k] = bf16_bits_to_float(h);
      }
      return absl::OkStatus();
    default:
      break;
  }
  const BlockFn fn = block_fn(static_cast<GgmlType>(type));
  for (uint64_t k = 0; k < blocks; ++k) fn(src + k * traits->block_bytes, dst + k * traits->block_size);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> dequantize_tensor(const GgufTensor& t) {
  if (!gguf_dequant_supported(t.type)) {
    return absl::UnimplementedError(absl::StrCat("tensor ", t.name, " has type ", ggml_type_name(t.type),
                                                 ", which exl3-import does not support (supported: F32, F16, BF16, "
                                                 "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"));
  }
  Tensor out = Tensor::zeros(DType::kF32, t.hf_shape());
  const absl::Status s = dequantize_gguf(t.type, t.data, t.nbytes, out.mutable_data<float>(), t.numel);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": ", s.message()));
  return out;
}

}  // namespace exl3
