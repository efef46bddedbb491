// CPU backend row gather (the hidden-state rows that go through the head).
#include <cstring>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {

void gather_rows_cpu(const void* x, const int32_t* rows, void* out, int64_t num_rows, int64_t row_bytes) {
  for (int64_t i = 0; i < num_rows; ++i) {
    std::memcpy(static_cast<uint8_t*>(out) + i * row_bytes, static_cast<const uint8_t*>(x) + rows[i] * row_bytes,
                row_bytes);
  }
}

}  // namespace exl3
