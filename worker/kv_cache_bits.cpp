// Parsing and pricing of the KV cache widths.
#include "worker/kv_cache_bits.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace exl3 {
namespace {

constexpr const char* kAllowed = "each of K and V must be 2..8 (quantized bits) or 16 (full precision)";

bool parse_width(absl::string_view text, int* bits) {
  const absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t == "fp16" || t == "FP16") {
    *bits = 16;
    return true;
  }
  return absl::SimpleAtoi(t, bits) && valid_kv_bits(*bits);
}

}  // namespace

bool valid_kv_bits(int bits) { return bits == 16 || (bits >= 2 && bits <= 8); }

absl::StatusOr<KvCacheBits> parse_kv_cache_bits(const std::string& text, const std::string& flag) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  KvCacheBits bits;
  bool ok = false;
  if (parts.size() == 1) {
    ok = parse_width(parts[0], &bits.k);
    bits.v = bits.k;
  } else if (parts.size() == 2) {
    ok = parse_width(parts[0], &bits.k) && parse_width(parts[1], &bits.v);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " \"", text, "\": expected K,V or N (N,N); ", kAllowed, ", e.g. 4,4 or 8,4 or 16"));
  }
  return bits;
}

absl::Status validate_kv_cache_bits(const KvCacheBits& bits, const std::string& what) {
  if (valid_kv_bits(bits.k) && valid_kv_bits(bits.v)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " ", bits.k, ",", bits.v, ": ", kAllowed));
}

std::string kv_cache_bits_name(const KvCacheBits& bits) { return absl::StrCat(bits.k, ",", bits.v); }

uint64_t kv_token_bytes(int64_t token_dim, int bits, uint64_t element_bytes) {
  const uint64_t dim = static_cast<uint64_t>(token_dim);
  if (bits == 16) return dim * element_bytes;
  return dim / kKvGroupSize * (4 * static_cast<uint64_t>(bits) + 2);
}

absl::Status check_kv_token_dim(int64_t token_dim, const KvCacheBits& bits) {
  if (!bits.quantized() || token_dim % kKvGroupSize == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a quantized KV cache (--cache-bits ", kv_cache_bits_name(bits),
                                                 ") needs KV heads x head_dim per "
                                                 "rank to be a multiple of ",
                                                 kKvGroupSize, ", got ", token_dim,
                                                 "; use --cache-bits 16 with this model"));
}

}  // namespace exl3
