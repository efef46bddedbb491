// CPU backend column-block copy (re-packs the vocabulary slices of tensor-parallel logits).
#include <cstring>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void copy_columns_cpu(const void* src, void* dst, int64_t rows, int64_t src_cols, int64_t dst_cols, int64_t column,
                      int64_t elem_bytes) {
  const int64_t row_bytes = src_cols * elem_bytes;
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(static_cast<uint8_t*>(dst) + (i * dst_cols + column) * elem_bytes,
                static_cast<const uint8_t*>(src) + i * row_bytes, row_bytes);
  }
}

}  // namespace exl3
