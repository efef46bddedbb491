// CUDA paged attention over a quantized KV cache (exl3-format.md §9; K and/or V quantized, each at
// its own width, the other side possibly F16 pages): the device twin of attention_ref for caches
// launch_attention hands over (paged_attention.cuh). One block of 4 warps per (chunk of tokens, KV
// head, chunk of its query heads): up to 32 (token, head) rows, 8 per warp. The block walks each run
// of same-sequence tokens of its chunk over the keys they can see (window respected), 32 keys at a
// time: the tile's keys and values are dequantized into shared memory as fp16 (a warp per 32-element
// group, kv_quant.cuh; the dequantized values are fp16 by definition, so nothing is lost), then each
// warp updates the online softmax of its rows (lane j scores key j in fp32; the output lives in
// lanes as dims lane + 32c). Never a dequantized copy of the cache: only the current tile.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 8;
constexpr int kRows = kWarps * kRowsPerWarp;  // (token, head) rows per block
constexpr int kTileKeys = 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xFFFFFFFFu;

struct QuantAttnArgs {
  const __half* q;
  __half* out;
  ConstKvSide k, v;
  const int32_t* positions;
  const int32_t* token_seq;
  const int32_t* page_table;
  int64_t tokens, num_seqs, max_pages, num_pages, heads, kv_heads, group;
  int32_t page_size, max_position, window;
  int32_t tokens_per_block, heads_per_block, head_chunks;
  float scale_log2;
};

__device__ __forceinline__ int32_t checked_position(const QuantAttnArgs& a, int64_t t) {
  const int32_t seq = a.token_seq[t];
  const int32_t pos = a.positions[t];
  if (seq < 0 || seq >= a.num_seqs || pos < 0 || pos > a.max_position || pos / a.page_size >= a.max_pages) {
    __trap();
  }
  return pos;
}

__device__ __forceinline__ int32_t window_start(const QuantAttnArgs& a, int32_t pos) {
  return a.window > 0 ? max(0, pos - a.window + 1) : 0;
}

// Cache row (page · page_size + slot) of key position `pos` of sequence `seq`; a page outside the
// cache traps.
__device__ __forceinline__ int64_t cache_row(const QuantAttnArgs& a, int32_t seq, int32_t pos) {
  const int32_t page = a.page_table[static_cast<int64_t>(seq) * a.max_pages + pos / a.page_size];
  if (page < 0 || page >= a.num_pages) __trap();
  return static_cast<int64_t>(page) * a.page_size + pos % a.page_size;
}

// Keys [start, start + 32) of one side for KV head `kv_head` into tile [32][kStride] halves; keys
// past `last` are zeros. Every thread of the block calls it.
template <int D, int kStride>
__device__ __forceinline__ void load_tile(const QuantAttnArgs& a, const ConstKvSide& side, int32_t seq, int32_t kv_head,
                                          int32_t start, int32_t last, __half* tile) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (side.bits == 16) {
    for (int i = static_cast<int>(threadIdx.x); i < kTileKeys * D / 2; i += kThreads) {
      const int j = i / (D / 2), d = 2 * (i % (D / 2));
      const int32_t pos = start + j;
      __half2 value = __float2half2_rn(0.0f);
      if (pos <= last) {
        const int64_t offset = (cache_row(a, seq, pos) * a.kv_heads + kv_head) * D + d;
        value = *reinterpret_cast<const __half2*>(side.pages + offset);
      }
      *reinterpret_cast<__half2*>(tile + j * kStride + d) = value;
    }
    return;
  }
  constexpr int kGroups = D / 32;  // groups of one head
  const int64_t token_groups = a.kv_heads * kGroups;
  for (int item = warp; item < kTileKeys * kGroups; item += kWarps) {
    const int j = item / kGroups, g = item % kGroups;
    const int32_t pos = start + j;
    float value = 0.0f;
    if (pos <= last) {  // uniform over the warp
      const int64_t group = cache_row(a, seq, pos) * token_groups + kv_head * kGroups + g;
      value = kv_quant::warp_dequantize_group(side.words + group * side.bits, side.scales[group], side.bits, lane);
    }
    tile[j * kStride + g * 32 + lane] = __float2half_rn(value);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) attention_quant_kernel(const QuantAttnArgs a) {
  constexpr int kKStride = D + 2;  // halves; odd word stride: lane j reading row j hits bank j
  constexpr int kC = D / 32;       // output dims per lane
  __shared__ __align__(16) float q_tile[kRows][D];
  __shared__ __align__(16) __half k_tile[kTileKeys * kKStride];
  __shared__ __align__(16) __half v_tile[kTileKeys * D];

  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y) / a.head_chunks;
  const int32_t first_in_group = (static_cast<int32_t>(blockIdx.y) % a.head_chunks) * a.heads_per_block;
  const int32_t block_heads = min(a.heads_per_block, static_cast<int32_t>(a.group) - first_in_group);
  const int64_t first_token = static_cast<int64_t>(blockIdx.x) * a.tokens_per_block;
  const int64_t end_token = min(first_token + a.tokens_per_block, a.tokens);
  const int32_t rows = static_cast<int32_t>(end_token - first_token) * block_heads;

  // Block row r: token first_token + r / block_heads, head kv_head · group + first_in_group + r % block_heads.
  for (int i = static_cast<int>(threadIdx.x); i < kRows * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float value = 0.0f;
    if (r < rows) {
      const int64_t t = first_token + r / block_heads;
      const int64_t head = kv_head * a.group + first_in_group + r % block_heads;
      value = __half2float(a.q[(t * a.heads + head) * D + d]);
    }
    q_tile[r][d] = value;
  }

  // This warp's rows w + 4i: token (-1 past the block), position, window start.
  int64_t row_token[kRowsPerWarp];
  int32_t row_pos[kRowsPerWarp], row_lo[kRowsPerWarp];
  float o[kRowsPerWarp][kC], m[kRowsPerWarp], l[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp + kWarps * i;
    row_token[i] = r < rows ? first_token + r / block_heads : -1;
    row_pos[i] = row_token[i] >= 0 ? checked_position(a, row_token[i]) : -1;
    row_lo[i] = row_token[i] >= 0 ? window_start(a, row_pos[i]) : 0;
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) o[i][c] = 0.0f;
  }

  for (int64_t run_begin = first_token; run_begin < end_token;) {
    const int32_t seq = a.token_seq[run_begin];
    int64_t run_end = run_begin + 1;  // exclusive
    while (run_end < end_token && a.token_seq[run_end] == seq) ++run_end;
    int32_t lo = std::numeric_limits<int32_t>::max(), hi = 0;
    for (int64_t t = run_begin; t < run_end; ++t) {
      const int32_t pos = checked_position(a, t);
      lo = min(lo, window_start(a, pos));
      hi = max(hi, pos);
    }
    for (int32_t start = lo; start <= hi; start += kTileKeys) {
      __syncthreads();  // the previous tile (and q_tile, the first time) is complete / consumed
      load_tile<D, kKStride>(a, a.k, seq, kv_head, start, hi, k_tile);
      load_tile<D, D>(a, a.v, seq, kv_head, start, hi, v_tile);
      __syncthreads();

      // Scores of key start + lane for every row of this warp.
      float s[kRowsPerWarp];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) s[i] = 0.0f;
      const __half* k_row = k_tile + lane * kKStride;
#pragma unroll 4
      for (int d = 0; d < D; d += 2) {
        const float2 k2 = __half22float2(*reinterpret_cast<const __half2*>(k_row + d));
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
          const float2 q2 = *reinterpret_cast<const float2*>(&q_tile[warp + kWarps * i][d]);
          s[i] = fmaf(q2.x, k2.x, fmaf(q2.y, k2.y, s[i]));
        }
      }
      const int32_t key = start + lane;
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const bool in_run = row_token[i] >= run_begin && row_token[i] < run_end;
        if (!in_run || start > row_pos[i] || start + kTileKeys <= row_lo[i]) continue;  // uniform over the warp
        const float score = key >= row_lo[i] && key <= row_pos[i] ? s[i] * a.scale_log2 : -INFINITY;
        float tile_max = score;
#pragma unroll
        for (int h = 16; h > 0; h /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(kFull, tile_max, h));
        const float m_new = fmaxf(m[i], tile_max);  // finite: the tile holds a key of this row
        const float alpha = exp2f(m[i] - m_new);
        const float p = exp2f(score - m_new);
        l[i] = l[i] * alpha + p;
#pragma unroll
        for (int c = 0; c < kC; ++c) o[i][c] *= alpha;
#pragma unroll 8
        for (int j = 0; j < kTileKeys; ++j) {
          const float pj = __shfl_sync(kFull, p, j);
#pragma unroll
          for (int c = 0; c < kC; ++c) o[i][c] = fmaf(pj, __half2float(v_tile[j * D + c * 32 + lane]), o[i][c]);
        }
        m[i] = m_new;
      }
    }
    run_begin = run_end;
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    if (row_token[i] < 0) continue;
    float sum = l[i];
#pragma unroll
    for (int h = 16; h > 0; h /= 2) sum += __shfl_xor_sync(kFull, sum, h);
    const int r = warp + kWarps * i;
    const int64_t head = kv_head * a.group + first_in_group + r % block_heads;
    __half* out = a.out + (row_token[i] * a.heads + head) * D;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) out[c * 32 + lane] = __float2half_rn(o[i][c] * inv);
  }
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

// Contract: that of launch_attention (paged_attention.cuh) with k_bits, v_bits each 16 (pages F16,
// 4-byte aligned) or 2..8 (words I32 [num_pages, page_size, kv_heads · head_dim / 32 · bits],
// scales F16 [num_pages, page_size, kv_heads · head_dim / 32]); window >= 0. Grid: (ceil(tokens /
// tokens_per_block), kv_heads · head chunks), where a block takes min(group, 32) heads and, unless
// every token is its sequence's only one, 32 / that many tokens. No scratch, no allocation.
void launch_attention_quant(const AttentionParams& p, cudaStream_t stream) {
  const PagedBatch& b = p.batch;
  EXL3_CHECK(b.tokens >= 0 && b.tokens <= std::numeric_limits<int32_t>::max(), "attention_quant: tokens ", b.tokens);
  EXL3_CHECK(p.heads > 0 && p.kv_heads > 0 && p.heads % p.kv_heads == 0, "attention_quant: heads ", p.heads,
             " not a multiple of kv_heads ", p.kv_heads);
  EXL3_CHECK(p.head_dim == 64 || p.head_dim == 128, "attention_quant: head_dim ", p.head_dim,
             " unsupported (64 or 128 only)");
  EXL3_CHECK(p.scale > 0.0f, "attention_quant: scale ", p.scale);
  EXL3_CHECK(p.window >= 0 && p.window <= std::numeric_limits<int32_t>::max(), "attention_quant: window ", p.window);
  EXL3_CHECK(p.num_pages > 0 && b.page_size > 0 && b.page_size <= std::numeric_limits<int32_t>::max(),
             "attention_quant: num_pages ", p.num_pages, " page_size ", b.page_size);
  EXL3_CHECK(b.num_seqs > 0 && b.max_pages > 0, "attention_quant: num_seqs ", b.num_seqs, " max_pages ", b.max_pages);
  EXL3_CHECK(b.max_position >= 0 && b.max_position < std::numeric_limits<int32_t>::max(),
             "attention_quant: max_position ", b.max_position);
  const ConstKvSide k{p.k_pages, p.k_words, p.k_scales, p.k_bits};
  const ConstKvSide v{p.v_pages, p.v_words, p.v_scales, p.v_bits};
  for (const ConstKvSide* side : {&k, &v}) {
    const bool full = side->bits == 16 && side->pages != nullptr && aligned(side->pages, 4);
    const bool quantized = side->bits >= 2 && side->bits <= 8 && side->words != nullptr && side->scales != nullptr;
    EXL3_CHECK(full || quantized, "attention_quant: a side of ", side->bits,
               " bits (16 with 4-byte aligned pages, or 2..8 with words and scales)");
  }
  const int64_t group = p.heads / p.kv_heads;
  const int64_t heads_per_block = std::min<int64_t>(group, kRows);
  const int64_t head_chunks = (group + heads_per_block - 1) / heads_per_block;
  const int64_t tokens_per_block = b.tokens == b.num_seqs ? 1 : std::max<int64_t>(1, kRows / heads_per_block);
  EXL3_CHECK(p.kv_heads * head_chunks <= 65535, "attention_quant: ", p.heads, " heads over ", p.kv_heads,
             " KV heads exceed the grid");
  if (b.tokens == 0) return;
  EXL3_CHECK(p.q != nullptr && p.out != nullptr, "attention_quant: null q/out");
  EXL3_CHECK(b.positions != nullptr && b.token_seq != nullptr && b.page_table != nullptr,
             "attention_quant: null batch metadata");
  const QuantAttnArgs args{p.q,
                           p.out,
                           k,
                           v,
                           b.positions,
                           b.token_seq,
                           b.page_table,
                           b.tokens,
                           b.num_seqs,
                           b.max_pages,
                           p.num_pages,
                           p.heads,
                           p.kv_heads,
                           group,
                           static_cast<int32_t>(b.page_size),
                           b.max_position,
                           static_cast<int32_t>(p.window),
                           static_cast<int32_t>(tokens_per_block),
                           static_cast<int32_t>(heads_per_block),
                           static_cast<int32_t>(head_chunks),
                           p.scale * kLog2e};
  const dim3 grid(static_cast<unsigned>((b.tokens + tokens_per_block - 1) / tokens_per_block),
                  static_cast<unsigned>(p.kv_heads * head_chunks));
  if (p.head_dim == 64) {
    attention_quant_kernel<64><<<grid, kThreads, 0, stream>>>(args);
  } else {
    attention_quant_kernel<128><<<grid, kThreads, 0, stream>>>(args);
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
