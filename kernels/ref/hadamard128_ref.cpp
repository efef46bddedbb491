// CPU reference of the blockwise 128-point Walsh-Hadamard transform (exl3-format.md §3): every
// consecutive 128-element block of each row is multiplied by H128 / sqrt(128), natural order.
#include <cstdint>

#include "kernels/check.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;
constexpr float kInvSqrt128 = 0.08838834764831845f;  // 1 / sqrt(128)

// Fast WHT of one block: log2(128) = 7 butterfly stages with half-size h = 1, 2, ..., 64; each
// stage pairs i with i + h inside every group of 2h elements. This computes x · H128 with
// H128[i][j] = (-1)^popcount(i & j).
void wht128(float* x) {
  for (int64_t h = 1; h < kBlock; h *= 2) {
    for (int64_t group = 0; group < kBlock; group += 2 * h) {
      for (int64_t i = group; i < group + h; ++i) {
        const float a = x[i];
        const float b = x[i + h];
        x[i] = a + b;
        x[i + h] = a - b;
      }
    }
  }
  for (int64_t i = 0; i < kBlock; ++i) x[i] *= kInvSqrt128;
}

}  // namespace

void hadamard128_ref(float* data, int64_t rows, int64_t cols) {
  EXL3_CHECK(rows >= 0, "rows ", rows);
  EXL3_CHECK(cols >= 0 && cols % kBlock == 0, "cols must be a multiple of 128, got ", cols);
  EXL3_CHECK(data != nullptr || rows * cols == 0, "null data");
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += kBlock) wht128(data + r * cols + c);
  }
}

}  // namespace exl3
