// CUDA NEOX rotary embedding: the device twin of rope_ref. One block per token and group of heads:
// its threads form cos/sin · attention_scaling for the rotary_dim/2 frequencies (shared memory),
// then rotate every (head, i) pair of the group in place in fp32, rounding to fp16 once.
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/rope_rotation.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 128;
// cos and sin tables in (static-limit) dynamic shared memory: 2 · 4 B · half <= 48 KiB.
constexpr int64_t kMaxHalf = 6144;

// Grid (tokens, head groups): a block rotates kHeadsPerBlock heads of one token.
constexpr int kHeadsPerBlock = 4;

__global__ void rope_kernel(__half* __restrict__ x, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int heads, int head_dim, int half,
                            float attention_scaling) {
  extern __shared__ float cos_sin[];  // [half] cos, then [half] sin
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  for (int i = static_cast<int>(threadIdx.x); i < half; i += static_cast<int>(blockDim.x)) {
    rope_rotation::scaled_cos_sin(pos, inv_freq[i], attention_scaling, cos_sin[i], cos_sin[half + i]);
  }
  __syncthreads();
  const int first_head = static_cast<int>(blockIdx.y) * kHeadsPerBlock;
  const int block_heads = min(kHeadsPerBlock, heads - first_head);
  __half* token = x + (t * heads + first_head) * head_dim;
  const int pairs = block_heads * half;
  for (int idx = static_cast<int>(threadIdx.x); idx < pairs; idx += static_cast<int>(blockDim.x)) {
    const int h = idx / half;
    const int i = idx - h * half;
    __half* v = token + h * head_dim;
    const float x1 = __half2float(v[i]);
    const float x2 = __half2float(v[i + half]);
    rope_rotation::rotate_pair(x1, x2, cos_sin[i], cos_sin[half + i], v[i], v[i + half]);
  }
}

}  // namespace

// Contract: tokens >= 0, heads > 0, head_dim > 0; rotary_dim even, 0 < rotary_dim <= head_dim,
// rotary_dim / 2 <= 6144; x F16 [tokens, heads, head_dim], positions I32 [tokens] (|pos| < 2^24,
// exact in fp32), inv_freq F32 [rotary_dim / 2]; device pointers, non-null when tokens > 0.
void launch_rope(const RopeParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.tokens >= 0 && p.heads > 0 && p.head_dim > 0, "rope: tokens ", p.tokens, " heads ", p.heads,
             " head_dim ", p.head_dim);
  EXL3_CHECK(p.rotary_dim > 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim, "rope: rotary_dim ",
             p.rotary_dim, " with head_dim ", p.head_dim);
  EXL3_CHECK(p.rotary_dim / 2 <= kMaxHalf, "rope: rotary_dim ", p.rotary_dim, " too large");
  EXL3_CHECK(p.tokens <= std::numeric_limits<int32_t>::max(), "rope: too many tokens ", p.tokens);
  if (p.tokens == 0) return;
  EXL3_CHECK(p.x != nullptr && p.positions != nullptr && p.inv_freq != nullptr, "rope: null pointer");
  const int half = static_cast<int>(p.rotary_dim / 2);
  const size_t smem = 2 * sizeof(float) * static_cast<size_t>(half);
  EXL3_CHECK(p.heads <= 65535 * kHeadsPerBlock && p.heads * p.head_dim <= std::numeric_limits<int32_t>::max(),
             "rope: ", p.heads, " heads of ", p.head_dim);
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  rope_kernel<<<grid, kThreads, smem, stream>>>(p.x, p.positions, p.inv_freq, static_cast<int>(p.heads),
                                                 static_cast<int>(p.head_dim), half, p.attention_scaling);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
