// Tables of GGUF tensor and metadata value types (see gguf_types.h).
#include "import/gguf_types.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  constexpr uint32_t kK = 256;  // QK_K: super-block size of the K-quants and most IQ types
  switch (static_cast<GgmlType>(id)) {
    case GgmlType::kF32: return GgmlTypeTraits{"F32", 1, 4};
    case GgmlType::kF16: return GgmlTypeTraits{"F16", 1, 2};
    case GgmlType::kQ4_0: return GgmlTypeTraits{"Q4_0", 32, 2 + 16};
    case GgmlType::kQ4_1: return GgmlTypeTraits{"Q4_1", 32, 2 + 2 + 16};
    case GgmlType::kQ5_0: return GgmlTypeTraits{"Q5_0", 32, 2 + 4 + 16};
    case GgmlType::kQ5_1: return GgmlTypeTraits{"Q5_1", 32, 2 + 2 + 4 + 16};
    case GgmlType::kQ8_0: return GgmlTypeTraits{"Q8_0", 32, 2 + 32};
    case GgmlType::kQ8_1: return GgmlTypeTraits{"Q8_1", 32, 4 + 4 + 32};
    case GgmlType::kQ2_K: return GgmlTypeTraits{"Q2_K", kK, 2 + 2 + kK / 16 + kK / 4};
    case GgmlType::kQ3_K: return GgmlTypeTraits{"Q3_K", kK, 2 + kK / 4 + kK / 8 + 12};
    case GgmlType::kQ4_K: return GgmlTypeTraits{"Q4_K", kK, 2 + 2 + kK / 2 + 12};
    case GgmlType::kQ5_K: return GgmlTypeTraits{"Q5_K", kK, 2 + 2 + kK / 2 + kK / 8 + 12};
    case GgmlType::kQ6_K: return GgmlTypeTraits{"Q6_K", kK, 2 + kK / 2 + kK / 4 + kK / 16};
    case GgmlType::kQ8_K: return GgmlTypeTraits{"Q8_K", kK, 4 + kK + kK / 8};
    case GgmlType::kIQ2_XXS: return GgmlTypeTraits{"IQ2_XXS", kK, 2 + kK / 4};
    case GgmlType::kIQ2_XS: return GgmlTypeTraits{"IQ2_XS", kK, 2 + kK / 4 + kK / 32};
    case GgmlType::kIQ3_XXS: return GgmlTypeTraits{"IQ3_XXS", kK, 2 + kK / 4 + kK / 8};
    case GgmlType::kIQ1_S: return GgmlTypeTraits{"IQ1_S", kK, 2 + kK / 8 + kK / 16};
    case GgmlType::kIQ4_NL: return GgmlTypeTraits{"IQ4_NL", 32, 2 + 16};
    case GgmlType::kIQ3_S: return GgmlTypeTraits{"IQ3_S", kK, 2 + kK / 4 + kK / 8 + kK / 32 + 4};
    case GgmlType::kIQ2_S: return GgmlTypeTraits{"IQ2_S", kK, 2 + kK / 4 + kK / 16};
    case GgmlType::kIQ4_XS: return GgmlTypeTraits{"IQ4_XS", kK, 2 + 2 + kK / 2 + kK / 64};
    case GgmlType::kI8: return GgmlTypeTraits{"I8", 1, 1};
    case GgmlType::kI16: return GgmlTypeTraits{"I16", 1, 2};
    case GgmlType::kI32: return GgmlTypeTraits{"I32", 1, 4};
    case GgmlType::kI64: return GgmlTypeTraits{"I64", 1, 8};
    case GgmlType::kF64: return GgmlTypeTraits{"F64", 1, 8};
    case GgmlType::kIQ1_M: return GgmlTypeTraits{"IQ1_M", kK, kK / 8 + kK / 16 + kK / 32};
    case GgmlType::kBF16: return GgmlTypeTraits{"BF16", 1, 2};
    case GgmlType::kTQ1_0: return GgmlTypeTraits{"TQ1_0", kK, 2 + 4 * 13};
    case GgmlType::kTQ2_0: return GgmlTypeTraits{"TQ2_0", kK, 2 + 64};
    case GgmlType::kMXFP4: return GgmlTypeTraits{"MXFP4", 32, 1 + 16};
    case GgmlType::kNVFP4: return GgmlTypeTraits{"NVFP4", 64, 4 + 32};
    case GgmlType::kQ1_0: return GgmlTypeTraits{"Q1_0", 128, 2 + 16};
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t id) {
  const auto traits = ggml_type_traits(id);
  return traits ? std::string(traits->name) : absl::StrCat("type ", id);
}

std::string gguf_value_type_name(uint32_t id) {
  static constexpr const char* kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                           "bool",  "string", "array",  "uint64", "int64",  "float64"};
  if (id < sizeof(kNames) / sizeof(kNames[0])) return kNames[id];
  return absl::StrCat("type ", id);
}

uint32_t gguf_scalar_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    case GgufValueType::kString: case GgufValueType::kArray: return 0;
  }
  return 0;
}

}  // namespace exl3
