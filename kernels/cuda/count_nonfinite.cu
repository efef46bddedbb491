// Grid-stride scan of an F16 array for ±inf and NaN (see count_nonfinite.cuh).
#include <algorithm>

#include "kernels/check.h"
#include "kernels/cuda/count_nonfinite.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;  // grid-stride beyond; enough blocks to fill 132 SMs
constexpr unsigned long long kNone = ~0ull;

__global__ void init_result_kernel(unsigned long long* result) {
  result[0] = 0;
  result[1] = kNone;
}

__global__ void count_nonfinite_kernel(const __half* __restrict__ x, int64_t n, unsigned long long* result) {
  unsigned long long count = 0;
  unsigned long long first = kNone;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // Exponent bits all ones: infinity or NaN.
    if ((__half_as_ushort(x[i]) & 0x7C00u) == 0x7C00u) {
      ++count;
      first = min(first, static_cast<unsigned long long>(i));
    }
  }
  if (count > 0) {
    atomicAdd(&result[0], count);
    atomicMin(&result[1], first);
  }
}

}  // namespace

void launch_count_nonfinite(const CountNonfiniteParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.n >= 0, "count_nonfinite: n = ", p.n);
  EXL3_CHECK(p.result != nullptr && (p.x != nullptr || p.n == 0), "count_nonfinite: null pointer");
  init_result_kernel<<<1, 1, 0, stream>>>(p.result);
  EXL3_CUDA_CHECK_LAUNCH();
  if (p.n == 0) return;
  const int64_t blocks = std::min<int64_t>((p.n + kThreads - 1) / kThreads, kMaxBlocks);
  count_nonfinite_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p.x, p.n, p.result);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
