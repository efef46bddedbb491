// CUDA row gather: out[i, :] = x[rows[i], :] for rows of any dtype, one block per output row,
// copying 16-byte words when sizes and pointers allow it and 4-byte words otherwise. A row index
// outside [0, src_rows) traps (a caller bug).
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 128;

template <typename Word>
__global__ void gather_rows_kernel(const Word* __restrict__ x, Word* __restrict__ out,
                                   const int32_t* __restrict__ rows, int64_t words, int64_t src_rows) {
  const int64_t i = blockIdx.x;
  const int32_t r = rows[i];
  if (r < 0 || r >= src_rows) __trap();
  const Word* src = x + static_cast<int64_t>(r) * words;
  Word* dst = out + i * words;
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) dst[w] = src[w];
}

template <typename Word>
void launch_words(const GatherRowsParams& p, cudaStream_t stream) {
  const int64_t words = p.row_bytes / static_cast<int64_t>(sizeof(Word));
  gather_rows_kernel<Word><<<static_cast<unsigned>(p.num_rows), kThreads, 0, stream>>>(
      static_cast<const Word*>(p.x), static_cast<Word*>(p.out), p.rows, words, p.src_rows);
  EXL3_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

// Contract: num_rows >= 0, src_rows > 0, row_bytes > 0 and a multiple of 4; x [src_rows,
// row_bytes] and out [num_rows, row_bytes] 4-byte aligned, not overlapping; rows I32 [num_rows]
// in [0, src_rows) (violations trap); device pointers, non-null when num_rows > 0; num_rows < 2^31.
void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.num_rows >= 0 && p.src_rows > 0, "gather_rows: num_rows ", p.num_rows, " src_rows ", p.src_rows);
  EXL3_CHECK(p.row_bytes > 0 && p.row_bytes % 4 == 0, "gather_rows: row_bytes ", p.row_bytes,
             " is not a positive multiple of 4");
  EXL3_CHECK(p.num_rows <= std::numeric_limits<int32_t>::max(), "gather_rows: too many rows ", p.num_rows);
  if (p.num_rows == 0) return;
  EXL3_CHECK(p.x != nullptr && p.out != nullptr && p.rows != nullptr, "gather_rows: null pointer");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.x) % 4 == 0 && reinterpret_cast<uintptr_t>(p.out) % 4 == 0,
             "gather_rows: x and out must be 4-byte aligned");
  if (p.row_bytes % 16 == 0 && aligned16(p.x) && aligned16(p.out)) {
    launch_words<uint4>(p, stream);
  } else {
    launch_words<uint32_t>(p, stream);
  }
}

}  // namespace exl3
