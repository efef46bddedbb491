// CUDA embedding lookup: the device twin of embedding_ref, one block per token copying its table
// row (F32, F16 or BF16) into the F32 output. An id outside [0, vocab) traps (a caller bug: the
// caller validates ids), so it never reads outside the table.
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 256;
constexpr int kInFlight = 16;

template <typename T>
__global__ void embedding_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids,
                                 float* __restrict__ out, int64_t dim, int64_t vocab) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  if (id < 0 || id >= vocab) __trap();
  const T* row = table + static_cast<int64_t>(id) * dim;
  float* dst = out + t * dim;
  // kInFlight loads a thread before its stores: a table row is cold in memory, and one load at a
  // time paid its latency dim / kThreads times (23 us a 4096-wide row on an H200).
  const int64_t stride = blockDim.x;
  for (int64_t first = threadIdx.x; first < dim; first += kInFlight * stride) {
    float v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int64_t i = first + j * stride;
      v[j] = i < dim ? cuda_io::to_f32(row[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int64_t i = first + j * stride;
      if (i < dim) dst[i] = v[j];
    }
  }
}

}  // namespace

// Contract: n >= 0, dim > 0, vocab > 0; table F32/F16/BF16 [vocab, dim], ids I32 [n] in
// [0, vocab) (violations trap), out F32 [n, dim]; device pointers, non-null when n > 0; n < 2^31.
void launch_embedding(const EmbeddingParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.n >= 0 && p.dim > 0 && p.vocab > 0, "embedding: n ", p.n, " dim ", p.dim, " vocab ", p.vocab);
  EXL3_CHECK(p.n <= std::numeric_limits<int32_t>::max(), "embedding: too many tokens ", p.n);
  if (p.n == 0) return;
  EXL3_CHECK(p.table != nullptr && p.ids != nullptr && p.out != nullptr, "embedding: null pointer");
  cuda_io::visit_float_dtype(p.table_dtype, "embedding table", [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_kernel<T><<<static_cast<unsigned>(p.n), kThreads, 0, stream>>>(static_cast<const T*>(p.table), p.ids,
                                                                               p.out, p.dim, p.vocab);
    EXL3_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace exl3
