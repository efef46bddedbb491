// CUDA residual add: the device twin of add_inplace_ref (x F32 += y F32 or F16), grid-stride.
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void add_kernel(float* __restrict__ x, const T* __restrict__ y, int64_t n) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] += cuda_io::to_f32(y[i]);
  }
}

}  // namespace

// Contract: n >= 0; x F32, y F32 or F16, n elements each, device pointers, non-null when n > 0,
// not overlapping.
void launch_add(const AddParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.n >= 0, "add: n ", p.n);
  EXL3_CHECK(p.y_dtype == DType::kF32 || p.y_dtype == DType::kF16, "add: y ", dtype_name(p.y_dtype),
             " (F32 or F16 only)");
  if (p.n == 0) return;
  EXL3_CHECK(p.x != nullptr && p.y != nullptr, "add: null pointer");
  cuda_io::visit_float_dtype(p.y_dtype, "add y", [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_kernel<T><<<cuda_io::elementwise_blocks(p.n, kThreads), kThreads, 0, stream>>>(
        p.x, static_cast<const T*>(p.y), p.n);
    EXL3_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace exl3
