// CUDA gated activation: the device twin of silu_mul_ref, out = silu(gate) · up in fp32 (expf,
// IEEE division), rounded to fp16 once. Grid-stride over the elements.
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 256;

// No __restrict__: out may be gate or up.
__global__ void silu_mul_kernel(const __half* gate, const __half* up, __half* out, int64_t n) {
  allow_dependents();  // a dependent launch after this one may start its prologue
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = __half2float(gate[i]);
    const float u = __half2float(up[i]);
    out[i] = __float2half_rn(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace

// Contract: n >= 0; gate, up, out F16 [n] device pointers, non-null when n > 0; out may alias
// gate or up only exactly (same pointer), never partially.
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.n >= 0, "silu_mul: n ", p.n);
  if (p.n == 0) return;
  EXL3_CHECK(p.gate != nullptr && p.up != nullptr && p.out != nullptr, "silu_mul: null pointer");
  silu_mul_kernel<<<cuda_io::elementwise_blocks(p.n, kThreads), kThreads, 0, stream>>>(p.gate, p.up, p.out,
                                                                                       p.n);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
