// Rotary embedding of a step's queries and keys and the paged KV-cache write of its keys and
// values in one launch: the fusion of launch_rope (on q, then k) and launch_kv_write, with the
// same arithmetic (fp32 rotation, one rounding to fp16), so the results are those of the three
// launches. Grid (tokens, head groups): a block either rotates kHeadsPerBlock query heads in place,
// or rotates kHeadsPerBlock key heads (in place and into the cache) and copies their values. A
// dependent launch (dependent_launch.cuh): its blocks are scheduled while the kernel before it ends,
// and after the wait a thread's first values load with the token's metadata (one round trip to
// memory, then the page table for keys), each pair's angle computed where it is used.
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/paged_cache_slots.cuh"
#include "kernels/cuda/rope_rotation.cuh"

namespace exl3 {
namespace {

constexpr int kThreads = 128;
constexpr int kHeadsPerBlock = 4;
constexpr int64_t kMaxHalf = 6144;  // the contract of launch_rope (its cos/sin table), kept the same here

struct Args {
  __half* q;
  __half* k;
  const __half* v;
  __half* k_pages;
  __half* v_pages;
  CacheSlots slots;
  const float* inv_freq;
  float attention_scaling;
  int heads, kv_heads, head_dim, half;
  int q_groups;
};

__global__ void rope_kv_write_kernel(const Args a) {
  allow_dependents();
  const int64_t t = blockIdx.x;
  const bool keys = static_cast<int>(blockIdx.y) >= a.q_groups;
  const int group = keys ? static_cast<int>(blockIdx.y) - a.q_groups : static_cast<int>(blockIdx.y);
  const int heads = keys ? a.kv_heads : a.heads;
  const int first_head = group * kHeadsPerBlock;
  const int block_heads = min(kHeadsPerBlock, heads - first_head);
  __half* x = (keys ? a.k : a.q) + (t * heads + first_head) * a.head_dim;
  const __half* v = a.v + (t * a.kv_heads + first_head) * a.head_dim;
  // Pair i of the block is (d, d + half) of head i / half, d = i % half; elements past 2·half of a
  // head (rotary_dim < head_dim) are copied unchanged.
  const int pairs = block_heads * a.half;
  const int elements = block_heads * a.head_dim;
  const int tid = static_cast<int>(threadIdx.x);
  const auto pair_at = [&](int i) { return i / a.half * a.head_dim + i % a.half; };
  // The thread's first pair: its frequency (a constant of the model) before the wait, its values
  // right after it, in flight with the token's metadata; the cache slot (keys) needs the page
  // table, read once the metadata is here.
  const float freq0 = tid < pairs ? a.inv_freq[tid % a.half] : 0.0f;
  wait_for_prerequisites();  // positions and q, k, v come from earlier kernels of the step
  const int32_t pos = a.slots.positions[t];
  const int32_t seq = keys ? a.slots.token_seq[t] : 0;
  float x1 = 0.0f, x2 = 0.0f;
  if (tid < pairs) {
    x1 = __half2float(x[pair_at(tid)]);
    x2 = __half2float(x[pair_at(tid) + a.half]);
  }
  const __half v0 = keys && tid < elements ? v[tid] : __float2half_rn(0.0f);

  // The cache slot of this token (keys only); metadata outside the cache traps (CacheSlots).
  int64_t slot = 0;
  if (keys) slot = (a.slots.row_in(a.slots.page_of(seq, pos), pos) * a.kv_heads + first_head) * a.head_dim;
  for (int i = tid; i < pairs; i += static_cast<int>(blockDim.x)) {
    const int at = pair_at(i);
    float f = freq0;
    if (i != tid) {
      x1 = __half2float(x[at]);
      x2 = __half2float(x[at + a.half]);
      f = a.inv_freq[i % a.half];
    }
    float c, s;
    rope_rotation::scaled_cos_sin(static_cast<float>(pos), f, a.attention_scaling, c, s);
    __half r1, r2;
    rope_rotation::rotate_pair(x1, x2, c, s, r1, r2);
    x[at] = r1;
    x[at + a.half] = r2;
    if (keys) {
      a.k_pages[slot + at] = r1;
      a.k_pages[slot + at + a.half] = r2;
    }
  }
  if (!keys) return;
  for (int idx = tid; idx < elements; idx += static_cast<int>(blockDim.x)) {
    a.v_pages[slot + idx] = idx == tid ? v0 : v[idx];
    if (idx % a.head_dim >= 2 * a.half) a.k_pages[slot + idx] = x[idx];
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
               cache_slots(b, p.num_pages),
               p.inv_freq,
               p.attention_scaling,
               static_cast<int>(p.heads),
               static_cast<int>(p.kv_heads),
               static_cast<int>(p.head_dim),
               static_cast<int>(p.rotary_dim / 2),
               q_groups};
  launch_dependent_smem(rope_kv_write_kernel, dim3(static_cast<unsigned>(b.tokens), static_cast<unsigned>(q_groups + kv_groups)),
                        dim3(kThreads), 0, stream, a);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
