// Quantized KV tiles, the block source of the attention kernels (attention_kernels.cuh) as
// attention_quant.cu instantiates them: blocks of 32 keys of one (sequence, KV head) brought into
// shared memory as fp16 in the layout attend_block reads (rows of row_stride<D>() halves,
// attention_warp.cuh). A quantized side (exl3-format.md §9) goes through two steps: its raw words
// and scales are copied with cp.async into a staging buffer (one block ahead, double-buffered, so
// the copy of block b + 1 overlaps the work on block b), then each thread dequantizes whole 32-element groups from the staging buffer in registers (the WHT as 5 butterfly
// stages over 32 floats, the fp32 operations of kv_dequantize_group_ref in the same order, so the
// fp16 values are bit-equal to the reference's) and stores them into the tile. An F16 side is
// copied straight into its tile. Keys at or past the range's end are zeros.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_warp.cuh"
#include "kernels/cuda/kv_page_units.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3::kv_quant_tile {

using attention_detail::block_halves;
using attention_detail::BlockUnits;
using attention_detail::kBlockKeys;
using attention_detail::row_stride;
using attention_detail::smem_address;

// Bytes of one staging buffer of a side: the words and scales of 32 keys of one KV head (nothing
// for an F16 side). A multiple of 16.
__host__ __device__ constexpr int staging_bytes(int head_dim, int bits) {
  return bits == 16 ? 0 : kBlockKeys * (head_dim / 32) * (4 * bits + 2);
}

// Dynamic shared memory of a block: the K and V tiles, then two staging buffers (each K's part
// then V's part). At most 34816 bytes (head_dim 128, 8 bits): no opt-in above 48 KiB needed.
__host__ __device__ constexpr int smem_bytes(int head_dim, int k_bits, int v_bits) {
  return 2 * kBlockKeys * (head_dim + 8) * 2 + 2 * (staging_bytes(head_dim, k_bits) + staging_bytes(head_dim, v_bits));
}

// Where one (sequence, KV head)'s keys and values live.
struct TileSource {
  ConstKvSide k, v;
  attention_detail::PageUnits pages;
};

// cp.async of N = 4, 8 or 16 bytes (16 bypasses L1, the small ones cannot).
template <int N>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(smem)), "l"(gmem) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_address(smem)), "l"(gmem), "n"(N)
                 : "memory");
  }
}

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The words, then the scales, of keys [start, min(start + 32, end)) of a quantized side into
// `stage` (nothing for an F16 side). Threads tid = 0..kThreads-1 share the copies.
template <int D, int kThreads>
__device__ __forceinline__ void stage_side(const TileSource& src, const ConstKvSide& side, int32_t start, int32_t end,
                                           unsigned char* stage, int tid) {
  if (side.bits == 16) return;
  constexpr int kGroups = D / 32;
  constexpr int kPieceBytes = kGroups * 4;  // the words of one (row, KV head) are `bits` such pieces
  constexpr int kScaleBytes = kGroups * 2;
  const int bits = side.bits;
  const int per_key = bits + 1;  // pieces, then the scales
  auto* words = reinterpret_cast<uint32_t*>(stage);
  auto* scales = reinterpret_cast<__half*>(stage + kBlockKeys * kGroups * bits * 4);
  const BlockUnits units(src.pages, start, min(start + kBlockKeys, end) - 1);
  for (int task = tid; task < kBlockKeys * per_key; task += kThreads) {
    const int j = task / per_key, c = task % per_key;
    const int32_t pos = start + j;
    if (pos >= end) continue;
    const int64_t unit = units(pos);
    if (c < bits) {
      cp_async<kPieceBytes>(words + (j * bits + c) * kGroups, side.words + (unit * bits + c) * kGroups);
    } else {
      cp_async<kScaleBytes>(scales + j * kGroups, side.scales + unit * kGroups);
    }
  }
}

// Keys [start, start + 32) of an F16 side straight into its tile (zeros at or past `end`).
template <int D, int kThreads>
__device__ __forceinline__ void copy_f16_side(const TileSource& src, const ConstKvSide& side, int32_t start,
                                              int32_t end, __half* tile, int tid) {
  if (side.bits != 16) return;
  constexpr int kParts = D / 8;  // 16-byte pieces per row
  const BlockUnits units(src.pages, start, min(start + kBlockKeys, end) - 1);
  for (int task = tid; task < kBlockKeys * kParts; task += kThreads) {
    const int j = task / kParts, part = task % kParts;
    const int32_t pos = start + j;
    const bool valid = pos < end;
    const int64_t offset = valid ? units(pos) * D + part * 8 : 0;
    attention_detail::cp_async16(tile + j * row_stride<D>() + part * 8, side.pages + offset, valid);
  }
}

// One group (`words` in shared memory, B of them) dequantized as kv_dequantize_group_ref and
// stored as 32 fp16 values at dst (16-byte aligned).
template <int B>
__device__ __forceinline__ void dequantize_group(const uint32_t* words, __half scale, uint4* dst) {
  uint32_t w[B];
  if constexpr (B % 4 == 0) {
#pragma unroll
    for (int i = 0; i < B; i += 4) {
      const uint4 v = *reinterpret_cast<const uint4*>(words + i);
      w[i] = v.x;
      w[i + 1] = v.y;
      w[i + 2] = v.z;
      w[i + 3] = v.w;
    }
  } else if constexpr (B % 2 == 0) {
#pragma unroll
    for (int i = 0; i < B; i += 2) {
      const uint2 v = *reinterpret_cast<const uint2*>(words + i);
      w[i] = v.x;
      w[i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < B; ++i) w[i] = words[i];
  }
  constexpr float kM = static_cast<float>(1 << (B - 1));
  // 2^22 + q is built from its bits (ulp 0.5 there) and kBias = 2^22 + m - 0.5 is exact, so the
  // difference is exactly q - (m - 0.5), the reference's first operation, without an int->float.
  constexpr float kBias = 4194304.0f + (kM - 0.5f);
  const float factor = __half2float(scale) * kv_quant::kInvSqrt32 / kM;
  float x[32];
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    uint32_t q = 0;
#pragma unroll
    for (int pw = 8; pw >= 1; pw /= 2) {
      if ((B & pw) == 0) continue;
      const int off = e * pw;
      q |= ((w[(B & ~(2 * pw - 1)) + off / 32] >> (off % 32)) & ((1u << pw) - 1u)) << (B & (pw - 1));
    }
    // __fmul_rn: never contracted with the butterfly's first add (the reference rounds the product).
    x[e] = __fmul_rn(__uint_as_float(0x4A800000u | (q << 1)) - kBias, factor);
  }
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      if ((i & h) != 0) continue;
      const float a = x[i], b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
  }
  uint32_t packed[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) packed[i] = attention_detail::pack_half2(x[2 * i], x[2 * i + 1]);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = make_uint4(packed[4 * i], packed[4 * i + 1], packed[4 * i + 2], packed[4 * i + 3]);
}

// Every group of the first `keys` keys of a staged side into `tile`; the groups of later keys are
// zeros. Threads tid = 0..kThreads-1 take groups tid, tid + kThreads, ...
template <int D, int kThreads, int B>
__device__ __forceinline__ void dequantize_staged(const unsigned char* stage, int32_t keys, __half* tile, int tid) {
  constexpr int kGroups = D / 32;
  const auto* words = reinterpret_cast<const uint32_t*>(stage);
  const auto* scales = reinterpret_cast<const __half*>(stage + kBlockKeys * kGroups * B * 4);
#pragma unroll 1
  for (int item = tid; item < kBlockKeys * kGroups; item += kThreads) {
    const int j = item / kGroups, g = item % kGroups;
    auto* dst = reinterpret_cast<uint4*>(tile + j * row_stride<D>() + g * 32);
    if (j >= keys) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = make_uint4(0u, 0u, 0u, 0u);
      continue;
    }
    dequantize_group<B>(words + item * B, scales[item], dst);
  }
}

template <int D, int kThreads>
__device__ __forceinline__ void dequantize_side(int bits, const unsigned char* stage, int32_t keys, __half* tile,
                                                int tid) {
  switch (bits) {
    case 2: dequantize_staged<D, kThreads, 2>(stage, keys, tile, tid); break;
    case 3: dequantize_staged<D, kThreads, 3>(stage, keys, tile, tid); break;
    case 4: dequantize_staged<D, kThreads, 4>(stage, keys, tile, tid); break;
    case 5: dequantize_staged<D, kThreads, 5>(stage, keys, tile, tid); break;
    case 6: dequantize_staged<D, kThreads, 6>(stage, keys, tile, tid); break;
    case 7: dequantize_staged<D, kThreads, 7>(stage, keys, tile, tid); break;
    case 8: dequantize_staged<D, kThreads, 8>(stage, keys, tile, tid); break;
    default: break;  // 16: copied straight into the tile
  }
}

// The blocks of 32 keys [begin, end) of `src`, one after the other, as fp16 in k_tile / v_tile
// (keys at or past `end` zero). `smem` is the dynamic shared memory of smem_bytes(D, k bits,
// v bits), 16-byte aligned. Every thread tid = 0..kThreads-1 of the cooperating group (the whole
// block, or one warp when kThreads is 32) makes the same calls with the same arguments:
//   KvBlocks<D, kThreads> kv(src, smem, begin, end, tid);
//   for (int32_t b = 0; b < kv.blocks(); ++b) { kv.load(b); ...read the tiles...; kv.release(); }
template <int D, int kThreads>
class KvBlocks {
 public:
  __device__ __forceinline__ KvBlocks(const TileSource& src, unsigned char* smem, int32_t begin, int32_t end, int tid)
      : src_(src), begin_(begin), end_(end), tid_(tid) {
    k_tile_ = reinterpret_cast<__half*>(smem);
    v_tile_ = k_tile_ + block_halves<D>();
    k_stage_ = staging_bytes(D, src.k.bits);
    stage_bytes_ = k_stage_ + staging_bytes(D, src.v.bits);
    staging_ = smem + 2 * block_halves<D>() * sizeof(__half);
    blocks_ = end > begin ? (end - begin + kBlockKeys - 1) / kBlockKeys : 0;
    if (blocks_ > 0) stage(0);
    attention_detail::cp_async_commit();
  }

  __device__ __forceinline__ int32_t blocks() const { return blocks_; }
  __device__ __forceinline__ int32_t start(int32_t b) const { return begin_ + b * kBlockKeys; }
  __device__ __forceinline__ const __half* k_tile() const { return k_tile_; }
  __device__ __forceinline__ const __half* v_tile() const { return v_tile_; }

  // Block b (0, 1, ... in order) into the tiles, and block b + 1's staging on its way; the tiles
  // are readable by every thread of the group when it returns.
  __device__ __forceinline__ void load(int32_t b) {
    const int32_t first = start(b);
    copy_f16_side<D, kThreads>(src_, src_.k, first, end_, k_tile_, tid_);
    copy_f16_side<D, kThreads>(src_, src_.v, first, end_, v_tile_, tid_);
    attention_detail::cp_async_commit();  // block b's F16 sides
    // The other staging buffer was last read by block b - 1's dequantization, before a barrier.
    if (b + 1 < blocks_) stage(b + 1);
    attention_detail::cp_async_commit();  // block b + 1's staging (possibly empty)
    cp_async_wait<1>();                   // everything but block b + 1's staging has landed
    sync();
    const unsigned char* staged = staging_ + (b % 2) * stage_bytes_;
    const int32_t keys = end_ - first < kBlockKeys ? end_ - first : kBlockKeys;
    dequantize_side<D, kThreads>(src_.k.bits, staged, keys, k_tile_, tid_);
    dequantize_side<D, kThreads>(src_.v.bits, staged + k_stage_, keys, v_tile_, tid_);
    sync();
  }

  // The group is done reading the tiles of the block last loaded. A barrier only with an F16 side:
  // the next load's copies into the tiles start before its first barrier, its dequantized stores
  // only after it.
  __device__ __forceinline__ void release() const {
    if (src_.k.bits == 16 || src_.v.bits == 16) sync();
  }

 private:
  __device__ __forceinline__ static void sync() {
    if constexpr (kThreads == 32) {
      __syncwarp();
    } else {
      __syncthreads();
    }
  }

  __device__ __forceinline__ void stage(int32_t b) {
    unsigned char* buffer = staging_ + (b % 2) * stage_bytes_;
    stage_side<D, kThreads>(src_, src_.k, start(b), end_, buffer, tid_);
    stage_side<D, kThreads>(src_, src_.v, start(b), end_, buffer + k_stage_, tid_);
  }

  TileSource src_;
  int32_t begin_, end_;
  int tid_;
  __half* k_tile_;
  __half* v_tile_;
  unsigned char* staging_;
  int k_stage_, stage_bytes_;
  int32_t blocks_;
};

}  // namespace exl3::kv_quant_tile
