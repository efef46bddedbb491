// The tensor types (ggml_type) and metadata value types of the GGUF format: ids, names and block
// geometry (elements per block, bytes per block), as the format defines them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace exl3 {

// ggml's tensor type ids as stored in a GGUF tensor info (gaps are retired ids).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22,
  kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39, kNVFP4 = 40, kQ1_0 = 41,
};

struct GgmlTypeTraits {
  const char* name;       // "Q4_K"
  uint32_t block_size;    // elements per block (1 for plain types)
  uint32_t block_bytes;   // bytes per block
};

// Traits of a known type id; nullopt for an id the format does not define.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);
// "Q4_K", or "type 99" for an unknown id.
std::string ggml_type_name(uint32_t id);

// Metadata value types of GGUF key/value pairs.
enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8,
  kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// "uint32", "string", ...; "type 13" for an unknown id.
std::string gguf_value_type_name(uint32_t id);
// Bytes of one scalar of this type in the file (0 for string and array, which have a length).
uint32_t gguf_scalar_bytes(GgufValueType type);

}  // namespace exl3
