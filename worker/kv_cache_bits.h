// KvCacheBits: the storage width of the KV cache's keys and values (exl3-format.md §9): 16 = full
// precision pages of the backend's kv_dtype (F16 on CUDA, F32 on the CPU), 2..8 = quantized
// (per 32-element group, `bits` I32 words of bit planes and one fp16 scale). The spelling of the
// --cache-bits flag ("K,V" or "N" for N,N) and the bytes one token's vector costs at a width.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace exl3 {

struct KvCacheBits {
  int k = 16;
  int v = 16;

  bool quantized() const { return k != 16 || v != 16; }
  bool operator==(const KvCacheBits&) const = default;
};

// Elements per quantization group and the widths a cache may use.
inline constexpr int64_t kKvGroupSize = 32;
bool valid_kv_bits(int bits);  // 2..8 or 16

// "K,V" (each 2..8 or 16; "fp16" is accepted for 16) or a single width N meaning N,N. Errors name
// `flag` and say what is allowed.
absl::StatusOr<KvCacheBits> parse_kv_cache_bits(const std::string& text, const std::string& flag);
// Checks both widths; errors name `what` (e.g. "--cache-bits" or "LoadShard.cache_k_bits").
absl::Status validate_kv_cache_bits(const KvCacheBits& bits, const std::string& what);
// "4,4", "16,16": the flag's spelling.
std::string kv_cache_bits_name(const KvCacheBits& bits);

// Bytes of one token's K (or V) vector of `token_dim` elements at `bits`: token_dim * element_bytes
// at 16, token_dim / 32 * (4 * bits + 2) quantized (token_dim % 32 == 0, checked by the caller).
uint64_t kv_token_bytes(int64_t token_dim, int bits, uint64_t element_bytes);

// OK when a cache of `token_dim` elements per token (one rank's KV heads x head_dim) can be
// stored at `bits`: quantized widths need token_dim % 32 == 0.
absl::Status check_kv_token_dim(int64_t token_dim, const KvCacheBits& bits);

}  // namespace exl3
