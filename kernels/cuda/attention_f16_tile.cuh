// F16 KV tiles for the attention kernels of attention.cu: blocks of 32 keys of one (sequence, KV
// head) copied from F16 pages into shared memory with cp.async, double-buffered (the copy of block
// b + 1 overlaps the work on block b), in the layout attend_block reads (rows of row_stride<D>()
// halves, attention_warp.cuh). The same block interface as kv_quant_tile::KvBlocks, so the kernels
// of attention_kernels.cuh serve both.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_warp.cuh"
#include "kernels/cuda/kv_page_units.cuh"

namespace exl3::attention_detail {

// Where the keys and values of one (sequence, KV head) live: pages F16 [num_pages, page_size,
// kv_heads, D], a key's head at its unit · D.
template <int D>
struct KvSource {
  const __half* k_pages;
  const __half* v_pages;
  PageUnits pages;
};

// Threads 0..kThreads-1 of the block copy the keys [start, start + 32) into kbuf/vbuf (rows of
// row_stride<D>() halves) with cp.async; keys at or past `end` are zero-filled, so masked
// probabilities (exactly 0) never meet a non-finite value. Keys in one page (BlockUnits) are
// copied by pointers that step kv_heads · D a key.
template <int D, int kThreads>
__device__ __forceinline__ void load_kv_block(__half* kbuf, __half* vbuf, const KvSource<D>& src, int32_t start,
                                              int32_t end) {
  constexpr int kParts = D / 8;  // 16-byte pieces per row
  static_assert(kThreads % kParts == 0, "threads must cover whole rows");
  constexpr int kRowsPerPass = kThreads / kParts;
  const int part = static_cast<int>(threadIdx.x) % kParts;
  const int first_row = static_cast<int>(threadIdx.x) / kParts;
  const int32_t last = min(start + kBlockKeys, end) - 1;  // the block's last key (blocks are never empty)
  const BlockUnits units(src.pages, start, last);
  if (units.one_page) {
    const int64_t key_stride = src.pages.kv_heads * D;
    const int64_t offset = units.first * D + first_row * key_stride + part * 8;
    const __half* k_row = src.k_pages + offset;
    const __half* v_row = src.v_pages + offset;
    const int keys = last - start + 1;
#pragma unroll
    for (int i = 0; i < kBlockKeys / kRowsPerPass; ++i) {
      const int r = first_row + i * kRowsPerPass;
      const bool valid = r < keys;
      cp_async16(kbuf + r * row_stride<D>() + part * 8, valid ? k_row : src.k_pages, valid);
      cp_async16(vbuf + r * row_stride<D>() + part * 8, valid ? v_row : src.v_pages, valid);
      k_row += kRowsPerPass * key_stride;
      v_row += kRowsPerPass * key_stride;
    }
    return;
  }
  for (int r = first_row; r < kBlockKeys; r += kRowsPerPass) {
    const int32_t pos = start + r;
    const bool valid = pos < end;
    const int64_t offset = (valid ? src.pages.unit(pos) * D : 0) + part * 8;
    cp_async16(kbuf + r * row_stride<D>() + part * 8, src.k_pages + (valid ? offset : 0), valid);
    cp_async16(vbuf + r * row_stride<D>() + part * 8, src.v_pages + (valid ? offset : 0), valid);
  }
}

// The blocks of 32 keys [begin, end) of `src`, one after the other, in the double buffer `smem`
// [2 buffers][K, V][block_halves<D>()] (keys at or past `end` zero). Every thread of the block
// (kThreads of them) makes the same calls with the same arguments:
//   F16Blocks<D, kThreads> kv(src, smem, begin, end);
//   for (int32_t b = 0; b < kv.blocks(); ++b) { kv.load(b); ...read the tiles...; kv.release(); }
template <int D, int kThreads>
class F16Blocks {
 public:
  __device__ __forceinline__ F16Blocks(const KvSource<D>& src, __half (*smem)[2][block_halves<D>()], int32_t begin,
                                       int32_t end)
      : src_(src), smem_(smem), begin_(begin), end_(end) {
    blocks_ = end > begin ? (end - begin + kBlockKeys - 1) / kBlockKeys : 0;
    if (blocks_ > 0) {
      load_kv_block<D, kThreads>(smem_[0][0], smem_[0][1], src_, begin_, end_);
      cp_async_commit();
    }
  }

  __device__ __forceinline__ int32_t blocks() const { return blocks_; }
  __device__ __forceinline__ int32_t start(int32_t b) const { return begin_ + b * kBlockKeys; }
  __device__ __forceinline__ const __half* k_tile() const { return smem_[current_][0]; }
  __device__ __forceinline__ const __half* v_tile() const { return smem_[current_][1]; }

  // Block b (0, 1, ... in order) readable in the tiles by every thread of the block when it
  // returns, and block b + 1's copy on its way into the other buffer.
  __device__ __forceinline__ void load(int32_t b) {
    current_ = b % 2;
    if (b + 1 < blocks_) {
      load_kv_block<D, kThreads>(smem_[(b + 1) % 2][0], smem_[(b + 1) % 2][1], src_, start(b) + kBlockKeys, end_);
    }
    cp_async_commit();  // possibly empty: keeps "all but one" meaning "block b has landed"
    cp_async_wait_all_but_one();
    __syncthreads();
  }

  // Every thread of the block is done reading the tiles of the block last loaded (the next load
  // refills them).
  __device__ __forceinline__ void release() const { __syncthreads(); }

 private:
  KvSource<D> src_;
  __half (*smem_)[2][block_halves<D>()];
  int32_t begin_, end_;
  int32_t blocks_;
  int current_ = 0;
};

}  // namespace exl3::attention_detail
