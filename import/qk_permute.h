// llama.cpp's row order of the Q and K projections, and its inverse. llama.cpp's converter
// reorders the rows of each head of a Hugging Face q_proj / k_proj weight from "first half, second
// half" (HF's rotate_half RoPE) to interleaved pairs (ggml's RoPE on adjacent elements): within head
// h of width D, GGUF row h*D + 2*j + i holds HF row h*D + i*(D/2) + j (i in {0, 1}, j < D/2).
// K uses the KV head count.
#pragma once

#include <cstdint>

namespace exl3 {

// out = the HF row order of `in` ([rows, cols] row-major in GGUF order); rows = heads * D, D even.
void unpermute_qk_rows(const float* in, float* out, int64_t rows, int64_t cols, int64_t heads);
// The converter's direction (HF order in, GGUF order out), for tests and fixtures.
void permute_qk_rows(const float* in, float* out, int64_t rows, int64_t cols, int64_t heads);

}  // namespace exl3
