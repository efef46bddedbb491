// Decoding of GGUF tensor data to fp32: the plain types F32, F16, BF16, the legacy block types
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. Results are
// bit-identical to the `gguf` Python package's dequantization (the same fp32 operations in the
// same order: e.g. Q4_1 is (d * q) + m, Q4_K is (d * sc) * q - (dmin * m), never fused). Every
// other type is refused by name.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "import/gguf_reader.h"
#include "kernels/tensor.h"

namespace exl3 {

// Whether dequantize_gguf decodes this GgmlType id.
bool gguf_dequant_supported(uint32_t type);

// Decodes `n` elements of `type` (n a multiple of its block size) from the `src_bytes` bytes at
// `src` (exactly the bytes n elements take) into dst[0, n).
absl::Status dequantize_gguf(uint32_t type, const uint8_t* src, uint64_t src_bytes, float* dst, int64_t n);

// The whole tensor as a host F32 tensor of shape t.hf_shape(). An unsupported type gives
// "tensor X has type IQ2_XXS, which exl3-import does not support".
absl::StatusOr<Tensor> dequantize_tensor(const GgufTensor& t);

}  // namespace exl3
