// Rotary embedding of a step's queries and keys and the paged KV-cache write of its keys and
// values in one launch: the fusion of launch_rope (on q, then k) and launch_kv_write, with the
// same arithmetic (fp32 rotation, one rounding to fp16), so the results are those of the three
// launches. Grid (tokens, head groups): a block either rotates kHeadsPerBlock query heads in place,
// or rotates kHeadsPerBlock key heads (in place and into the cache) and copies their values. A
// dependent launch (dependent_launch.cuh): its blocks are scheduled while the kernel before it ends.
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 128;
constexpr int kHeadsPerBlock = 4;
constexpr int64_t kMaxHalf = 6144;  // cos and sin tables in (static-limit) dynamic shared memory

struct Args {
  __half* q;
  __half* k;
  const __half* v;
  __half* k_pages;
  __half* v_pages;
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* page_table;
  const float* inv_freq;
  float attention_scaling;
  int heads, kv_heads, head_dim, half;
  int q_groups;
  int64_t num_seqs, max_pages, page_size, num_pages;
};

__global__ void rope_kv_write_kernel(const Args a) {
  extern __shared__ float cos_sin[];  // [half] cos, then [half] sin
  allow_dependents();
  wait_for_prerequisites();  // positions and q, k, v come from earlier kernels of the step
  const int64_t t = blockIdx.x;
  const int32_t pos = a.positions[t];
  for (int i = static_cast<int>(threadIdx.x); i < a.half; i += static_cast<int>(blockDim.x)) {
    const float angle = __fmul_rn(static_cast<float>(pos), a.inv_freq[i]);  // as rope_kernel
    float s, c;
    sincosf(angle, &s, &c);
    cos_sin[i] = c * a.attention_scaling;
    cos_sin[a.half + i] = s * a.attention_scaling;
  }
  __syncthreads();
  const bool keys = static_cast<int>(blockIdx.y) >= a.q_groups;
  const int group = keys ? static_cast<int>(blockIdx.y) - a.q_groups : static_cast<int>(blockIdx.y);
  const int heads = keys ? a.kv_heads : a.heads;
  const int first_head = group * kHeadsPerBlock;
  const int block_heads = min(kHeadsPerBlock, heads - first_head);
  __half* x = (keys ? a.k : a.q) + (t * heads + first_head) * a.head_dim;

  // The cache slot of this token (keys only); metadata outside the cache traps, as kv_write.
  int64_t slot = 0;
  if (keys) {
    const int32_t seq = a.token_seq[t];
    if (seq < 0 || seq >= a.num_seqs || pos < 0 || pos / a.page_size >= a.max_pages) __trap();
    const int32_t page = a.page_table[seq * a.max_pages + pos / a.page_size];
    if (page < 0 || page >= a.num_pages) __trap();
    slot = ((static_cast<int64_t>(page) * a.page_size + pos % a.page_size) * a.kv_heads + first_head) * a.head_dim;
  }
  // Element d of a head: d < half rotates the pair (d, d + half); half <= d < 2·half is done with
  // its partner; d >= rotary_dim (2·half) is copied unchanged.
  const int elements = block_heads * a.head_dim;
  for (int idx = static_cast<int>(threadIdx.x); idx < elements; idx += static_cast<int>(blockDim.x)) {
    const int d = idx % a.head_dim;
    const int base = idx - d;
    if (d < a.half) {
      const float x1 = __half2float(x[base + d]);
      const float x2 = __half2float(x[base + d + a.half]);
      const float c = cos_sin[d];
      const float s = cos_sin[a.half + d];
      const __half r1 = __float2half_rn(x1 * c - x2 * s);
      const __half r2 = __float2half_rn(x2 * c + x1 * s);
      x[base + d] = r1;
      x[base + d + a.half] = r2;
      if (keys) {
        a.k_pages[slot + base + d] = r1;
        a.k_pages[slot + base + d + a.half] = r2;
      }
    } else if (keys && d >= 2 * a.half) {
      a.k_pages[slot + idx] = x[idx];
    }
    if (keys) a.v_pages[slot + idx] = a.v[(t * a.kv_heads + first_head) * a.head_dim + idx];
  }
}

}  // namespace

// Contract: as launch_rope for q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] (one
// positions, inv_freq and attention_scaling), then as launch_kv_write for k (rotated) and v.
void launch_rope_kv_write(const RopeKvWriteParams& p, cudaStream_t stream) {
  const PagedBatch& b = p.batch;
  EXL3_CHECK(b.tokens >= 0 && b.tokens <= std::numeric_limits<int32_t>::max(), "rope_kv_write: tokens ", b.tokens);
  EXL3_CHECK(p.heads > 0 && p.kv_heads > 0 && p.head_dim > 0 && p.num_pages > 0, "rope_kv_write: heads ", p.heads,
             " kv_heads ", p.kv_heads, " head_dim ", p.head_dim, " num_pages ", p.num_pages);
  EXL3_CHECK(p.rotary_dim > 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim && p.rotary_dim / 2 <= kMaxHalf,
             "rope_kv_write: rotary_dim ", p.rotary_dim, " with head_dim ", p.head_dim);
  EXL3_CHECK(b.page_size > 0 && b.num_seqs > 0 && b.max_pages > 0, "rope_kv_write: page_size ", b.page_size,
             " num_seqs ", b.num_seqs, " max_pages ", b.max_pages);
  EXL3_CHECK(p.heads * p.head_dim <= std::numeric_limits<int32_t>::max() && p.heads <= 65535 * kHeadsPerBlock / 2,
             "rope_kv_write: ", p.heads, " heads of ", p.head_dim);
  if (b.tokens == 0) return;
  EXL3_CHECK(p.q != nullptr && p.k != nullptr && p.v != nullptr && p.k_pages != nullptr && p.v_pages != nullptr &&
                 p.inv_freq != nullptr,
             "rope_kv_write: null pointer");
  EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr,
             "rope_kv_write: null batch metadata");
  const int q_groups = static_cast<int>((p.heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  const int kv_groups = static_cast<int>((p.kv_heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  const Args a{p.q,
               p.k,
               p.v,
               p.k_pages,
               p.v_pages,
               b.positions,
               b.token_seq,
               b.page_table,
               p.inv_freq,
               p.attention_scaling,
               static_cast<int>(p.heads),
               static_cast<int>(p.kv_heads),
               static_cast<int>(p.head_dim),
               static_cast<int>(p.rotary_dim / 2),
               q_groups,
               b.num_seqs,
               b.max_pages,
               b.page_size,
               p.num_pages};
  const size_t smem = 2 * sizeof(float) * static_cast<size_t>(p.rotary_dim / 2);
  launch_dependent_smem(rope_kv_write_kernel, dim3(static_cast<unsigned>(b.tokens), static_cast<unsigned>(q_groups + kv_groups)),
                        dim3(kThreads), smem, stream, a);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
