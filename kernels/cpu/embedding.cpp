// CPU backend embedding lookup: rows of an F32/F16/BF16 table widened to fp32.
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp16.h"

namespace exl3 {

void embedding_cpu(const void* table, DType table_dtype, const int32_t* ids, float* out, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * dim;
    const int64_t base = static_cast<int64_t>(ids[t]) * dim;
    switch (table_dtype) {
      case DType::kF32:
        std::copy_n(static_cast<const float*>(table) + base, dim, o);
        break;
      case DType::kF16:
        for (int64_t i = 0; i < dim; ++i) o[i] = half_bits_to_float(static_cast<const uint16_t*>(table)[base + i]);
        break;
      case DType::kBF16:
        for (int64_t i = 0; i < dim; ++i) o[i] = bf16_bits_to_float(static_cast<const uint16_t*>(table)[base + i]);
        break;
      default:
        EXL3_CHECK(false, "embedding table dtype ", dtype_name(table_dtype));
    }
  }
}

}  // namespace exl3
