// Q/K row (un)permutation between Hugging Face and llama.cpp layouts (see qk_permute.h).
#include "import/qk_permute.h"

#include <cstring>

#include "kernels/check.h"

namespace exl3 {
namespace {

// Calls copy(gguf_row, hf_row) for every row.
template <typename F>
void for_each_row_pair(int64_t rows, int64_t heads, F&& copy) {
  EXL3_CHECK(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, "rows ", rows, " heads ", heads);
  const int64_t d = rows / heads, half = d / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < half; ++j) copy(h * d + 2 * j + i, h * d + i * half + j);
    }
  }
}

}  // namespace

void unpermute_qk_rows(const float* in, float* out, int64_t rows, int64_t cols, int64_t heads) {
  for_each_row_pair(rows, heads, [&](int64_t gguf_row, int64_t hf_row) {
    std::memcpy(out + hf_row * cols, in + gguf_row * cols, static_cast<size_t>(cols) * sizeof(float));
  });
}

void permute_qk_rows(const float* in, float* out, int64_t rows, int64_t cols, int64_t heads) {
  for_each_row_pair(rows, heads, [&](int64_t gguf_row, int64_t hf_row) {
    std::memcpy(out + gguf_row * cols, in + hf_row * cols, static_cast<size_t>(cols) * sizeof(float));
  });
}

}  // namespace exl3
