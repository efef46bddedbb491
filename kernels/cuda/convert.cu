// CUDA dtype conversion between F32, F16 and BF16 (any direction, round to nearest even through
// fp32, which holds every F16 and BF16 value exactly), grid-stride over the elements.
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 256;

template <typename Tin, typename Tout>
__global__ void convert_kernel(const Tin* __restrict__ in, Tout* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = cuda_io::from_f32<Tout>(cuda_io::to_f32(in[i]));
  }
}

}  // namespace

// Contract: n >= 0; in and out F32, F16 or BF16, n elements each, device pointers, non-null when
// n > 0, not overlapping.
void launch_convert(const ConvertParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.n >= 0, "convert: n ", p.n);
  if (p.n == 0) return;
  EXL3_CHECK(p.in != nullptr && p.out != nullptr, "convert: null pointer");
  cuda_io::visit_float_dtype(p.in_dtype, "convert in", [&](auto in_tag) {
    using Tin = typename decltype(in_tag)::type;
    cuda_io::visit_float_dtype(p.out_dtype, "convert out", [&](auto out_tag) {
      using Tout = typename decltype(out_tag)::type;
      convert_kernel<Tin, Tout><<<cuda_io::elementwise_blocks(p.n, kThreads), kThreads, 0, stream>>>(
          static_cast<const Tin*>(p.in), static_cast<Tout*>(p.out), p.n);
      EXL3_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace exl3
