// What the two few-rows EXL3 matmul kernels share (exl3_gemv.cu with fp16 activations,
// exl3_gemv_int8.cu with int8 ones): the launch arguments, how a warp finds its n-tiles, the
// per-warp cp.async ring that streams trellis words through shared memory, and the input
// transform of one (row, 128-input block) of the staged A and where its values go in the fp16
// kernel's staged layout (also written ahead of the matmul by exl3_gemv_stage.cu).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/exl3_gemv_layout.cuh"
#include "kernels/cuda/exl3_gemv_plan.h"
#include "kernels/cuda/exl3_tile.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3::gemv {

// One launch serves up to kMaxProblems linears of the same input (q/k/v, gate/up): blocks
// [block_begin, block_begin + blocks) of every slice belong to one problem.
struct GemvProblem {
  const __half* suh;        // linear only
  const uint32_t* trellis;  // tiles as stream words (§4.2)
  float* c;                 // linear: partials [slices, m, n]; bare: C [m, n]
  int64_t n;
  int block_begin;
  int blocks;
  // Linear only: the input of the whole k already in the kernel's staged layout, which a block
  // copies instead of transforming (and quantizing) its slice of x itself; null: the block stages
  // its slice. fp16 (launch_gemv_stage): A as [m_blocks][k tiles][staged_words_per_tile], for MUL1
  // the staged values' sum per row and 128 inputs [m][k / 128]. int8 (launch_gemv_stage_int8): q as
  // [m][k tiles][16], then scale · KINV [m][k / 128] and scale · Σ q [m][k / 128].
  const uint32_t* prestaged = nullptr;
  const float* prestaged_sums = nullptr;
};

struct GemvArgs {
  const __half* x;          // linear: x [m, in_features]; bare: A [m, k]
  int m;
  int64_t in_features;
  int64_t k;
  int tiles_per_slice;      // multiple of kSliceTiles
  int problems;
  GemvProblem problem[kMaxProblems];
  // Linear only, m <= kMaxNormRows: x is fp16(rms_norm(norm_x, norm_weight, norm_eps)), formed
  // while staging (block_norm_scales, then input_values); null: x as given.
  const float* norm_x = nullptr;  // F32 [m, in_features]
  const float* norm_weight = nullptr;
  float norm_eps = 0.0f;
};

// The int8 kernel (exl3_gemv_int8.cu): linear variant, MUL1 only, 1 <= m <= kInt8MaxGroups ·
// kInt8GroupRows; grid (blocks per slice, slices) with the problems' blocks assigned; writes the
// same partials as the fp16 linear kernel.
void launch_exl3_gemv_int8(const GemvArgs& args, int bits, dim3 grid, cudaStream_t stream);

// The problem of this block (selected field by field: no indexing into the parameter array).
__device__ __forceinline__ GemvProblem block_problem(const GemvArgs& args) {
  const int b = static_cast<int>(blockIdx.x);
  const bool second = args.problems > 1 && b >= args.problem[1].block_begin;
  const bool third = args.problems > 2 && b >= args.problem[2].block_begin;
  return third ? args.problem[2] : second ? args.problem[1] : args.problem[0];
}

// An L2 policy for data read once (the trellis streams): its lines go first, so that what is
// read back soon (the slices' partial products, stored under evict-last for the output pass) stays
// in L2. Measured on the H100 against default stores and copies (bench/results/2026-12-06-s27,
// runs 6-7): 8B decode batch 1 / 4 / 32 +2.8% / +3.1% / +2.8% with int8 auto, +2.1% / +2.1% /
// +3.1% off; 70B batch 1 / 32 +2.1% / +3.7%.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// An L2 policy for data read back soon (the slices' partial products): its lines go last.
__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Stores under the L2 policy `policy`.
__device__ __forceinline__ void store_with_policy(float* p, float v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(v), "l"(policy) : "memory");
}
__device__ __forceinline__ void store_with_policy(float* p, float v0, float v1, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;" ::"l"(p), "f"(v0), "f"(v1), "l"(policy)
               : "memory");
}

// 16 bytes from global memory to the shared-space address `dst`, under the L2 policy `policy`.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* gmem, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "l"(policy)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// A warp's share of its block's k-slice: the slice's tiles, and the n-tiles the warp walks. The
// warps of all blocks of a slice take its n-tiles in turn: warp w of the slice handles n-tiles
// w, w + W, w + 2W, ... (W warps per slice), each over the whole slice.
struct WarpWork {
  int64_t tiles_n;       // n-tiles of the problem
  int64_t tk_begin;      // first k-tile of the slice
  int num_tiles;         // k-tiles of the slice (a multiple of kSliceTiles: k is a multiple of 128)
  int64_t slice_warps;   // W
  int64_t first_tn;      // the warp's first n-tile
  int my_tiles_n;        // n-tiles the warp handles
};

__device__ __forceinline__ WarpWork warp_work(const GemvArgs& args, const GemvProblem& pr, int warp) {
  WarpWork w;
  w.tiles_n = pr.n / trellis::kTileSize;
  w.tk_begin = static_cast<int64_t>(blockIdx.y) * args.tiles_per_slice;
  const int64_t left = args.k / trellis::kTileSize - w.tk_begin;
  w.num_tiles = static_cast<int>(left < args.tiles_per_slice ? left : args.tiles_per_slice);
  w.slice_warps = static_cast<int64_t>(pr.blocks) * kWarps;
  w.first_tn = static_cast<int64_t>(static_cast<int>(blockIdx.x) - pr.block_begin) * kWarps + warp;
  w.my_tiles_n = w.first_tn < w.tiles_n ? static_cast<int>((w.tiles_n - 1 - w.first_tn) / w.slice_warps + 1) : 0;
  return w;
}

// One warp's stream of trellis stages: kTiles k-tiles of one n-tile each, n-tile after n-tile,
// into ring slots of kStageWords words (kSlots slots, all but one in flight).
template <int kBits, int kTiles = stage_tiles(kBits), int kSlots = kRingSlots>
struct TrellisRing {
  static constexpr int kWords = trellis::tile_words(kBits);
  static constexpr int kChunksPerTile = kWords / 4;  // 16-byte cp.async chunks
  static constexpr int kTilesPerStage = kTiles;
  static constexpr int kStageWords = kTiles * kWords;
  static constexpr int kStages = kSlots;
  static constexpr int kRingWords = kSlots * kStageWords;  // per warp
  static constexpr int kChunks = kTiles * kChunksPerTile;
  static constexpr int kChunksPerLane = (kChunks + kWarpSize - 1) / kWarpSize;

  // This lane's 16-byte chunks of a stage: chunk 0's source in the next stage to issue, the other
  // chunks' sources as fixed byte offsets from it (one pointer moves a stage, not one a chunk), and
  // their shared-space addresses in ring slot 0.
  const char* src;
  int64_t chunk_offset[kChunksPerLane];
  uint32_t dst[kChunksPerLane];
  int64_t stage_bytes;
  int64_t next_tn_bytes;  // from the end of one n-tile's column to the start of the warp's next
  int stages_per_tn;
  int issued_in_tn = 0;  // stages of the current n-tile issued so far
  int lane;
  uint64_t policy = l2_evict_first_policy();

  __device__ __forceinline__ TrellisRing(const GemvProblem& pr, const WarpWork& w, uint32_t* ring, int lane_id)
      : lane(lane_id) {
    const uint32_t* column = pr.trellis + (w.tk_begin * w.tiles_n + w.first_tn) * kWords;
    const int64_t tile_stride = w.tiles_n * kWords;
    stage_bytes = kTiles * tile_stride * 4;
    stages_per_tn = w.num_tiles / kTiles;
    next_tn_bytes = (w.slice_warps * kWords) * 4 - stages_per_tn * stage_bytes;
    int64_t first_word = 0;
#pragma unroll
    for (int c = 0; c < kChunksPerLane; ++c) {
      const int chunk = (lane + c * kWarpSize) % kChunks;
      const int i = chunk / kChunksPerTile;
      const int word = (chunk % kChunksPerTile) * 4;
      const int64_t at = i * tile_stride + word;
      if (c == 0) first_word = at;
      chunk_offset[c] = (at - first_word) * 4;
      dst[c] = static_cast<uint32_t>(__cvta_generic_to_shared(ring + i * kWords + word));
    }
    src = reinterpret_cast<const char*>(column + first_word);
  }

  // The next stage, into `slot`.
  __device__ __forceinline__ void issue(int slot) {
#pragma unroll
    for (int c = 0; c < kChunksPerLane; ++c) {
      if (kChunks % kWarpSize == 0 || lane + c * kWarpSize < kChunks) {
        cp_async16(dst[c] + static_cast<uint32_t>(slot * kStageWords * 4), c == 0 ? src : src + chunk_offset[c],
                   policy);
      }
    }
    src += stage_bytes;
    if (++issued_in_tn == stages_per_tn) {
      issued_in_tn = 0;
      src += next_tn_bytes;
    }
  }

  // The first stages (all but one slot), each committed as its own group.
  __device__ __forceinline__ void prime(int num_stages) {
#pragma unroll
    for (int stage = 0; stage < kStages - 1; ++stage) {
      if (stage < num_stages) issue(stage);
      cp_async_commit();
    }
  }
};

// Runs `consume(slot_words, done_in_tn)` on each of the warp's num_stages stages in order, once
// the stage has landed, keeping the ring full; `end_tn()` after the last stage of every n-tile.
// The slot loop is unrolled so that every slot offset is a constant. Rounds whose stages, and the
// stages they issue, all exist run without bounds checks; the last one or two rounds check.
template <typename Ring, typename Consume, typename EndTn>
__device__ __forceinline__ void stream_stages(Ring& ring, int num_stages, Consume&& consume, EndTn&& end_tn) {
  constexpr int kStages = Ring::kStages;
  int done_in_tn = 0;  // stages of the current n-tile consumed
  // Stage `stage` has landed for this lane; the warp barrier publishes every lane's copies and
  // ends all reads of the slot the next issue overwrites (read one stage ago).
  const auto run_stage = [&](int slot, bool issue_next) {
    cp_async_wait<kStages - 2>();
    __syncwarp();
    if (issue_next) ring.issue((slot + kStages - 1) % kStages);
    cp_async_commit();
    consume(slot * Ring::kStageWords, done_in_tn);
    if (++done_in_tn == ring.stages_per_tn) {
      end_tn();
      done_in_tn = 0;
    }
  };
  int base = 0;
  for (; base + 2 * kStages - 2 < num_stages; base += kStages) {
#pragma unroll
    for (int slot = 0; slot < kStages; ++slot) run_stage(slot, true);
  }
  for (; base < num_stages; base += kStages) {
#pragma unroll
    for (int slot = 0; slot < kStages; ++slot) {
      const int stage = base + slot;
      if (stage >= num_stages) break;
      run_stage(slot, stage + kStages - 1 < num_stages);
    }
  }
  cp_async_wait<0>();
}

// The lane's 4 inputs col0 .. col0 + 3 of `row` of a linear's x [m, in_features] before the
// Hadamard: fp16(x ⊙ suh), inputs >= in_features as zero.
__device__ __forceinline__ void linear_input_values(const __half* x, int64_t in_features, const __half* suh, int row,
                                                    int64_t col0, float (&v)[wht128::kPerLane]) {
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int64_t col = col0 + e;
    v[e] = col < in_features ? __half2float(__hmul(x[row * in_features + col], suh[col])) : 0.0f;
  }
}

// The RMSNorm scale 1 / sqrt(mean(x²) + eps) of each row of args.norm_x (m <= kMaxNormRows) into
// norm[kMaxNormRows · kWarps + row] (norm: kNormWords of shared memory), every thread of the block
// taking part (as rms_norm_kernel, up to the order of the sum). The caller synchronises before
// reading them.
__device__ __forceinline__ void block_norm_scales(const GemvArgs& args, float* norm) {
  float* const scales = norm + kMaxNormRows * kWarps;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  for (int row = 0; row < args.m; ++row) {
    const float* x = args.norm_x + row * args.in_features;
    float sum = 0.0f;
#pragma unroll 8
    for (int64_t i = threadIdx.x; i < args.in_features; i += kThreads) sum += x[i] * x[i];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
    if (lane == 0) norm[row * kWarps + warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x < static_cast<unsigned>(args.m)) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += norm[threadIdx.x * kWarps + w];
    scales[threadIdx.x] = 1.0f / sqrtf(total / static_cast<float>(args.in_features) + args.norm_eps);
  }
}

// As linear_input_values for x = fp16(norm_x · scale · norm_weight) (rms_norm_kernel's rounding).
__device__ __forceinline__ void norm_input_values(const GemvArgs& args, const __half* suh, float scale, int row,
                                                  int64_t col0, float (&v)[wht128::kPerLane]) {
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int64_t col = col0 + e;
    if (col < args.in_features) {
      const __half h = __float2half_rn(args.norm_x[row * args.in_features + col] * scale * args.norm_weight[col]);
      v[e] = __half2float(__hmul(h, suh[col]));
    } else {
      v[e] = 0.0f;
    }
  }
}

// The lane's 4 inputs col0 .. col0 + 3 of `row` (col0 = slice start + block + 4·lane) as the
// staged A starts from them. Linear: linear_input_values, or norm_input_values with the row's
// norm scale (norm_scales[row]: block_norm_scales' scales) where args.norm_x is set. Bare: A.
template <bool kLinear>
__device__ __forceinline__ void input_values(const GemvArgs& args, const __half* suh, int row, int64_t col0,
                                             float (&v)[wht128::kPerLane], const float* norm_scales = nullptr) {
  if constexpr (kLinear) {
    if (args.norm_x != nullptr) {
      norm_input_values(args, suh, norm_scales[row], row, col0, v);
    } else {
      linear_input_values(args.x, args.in_features, suh, row, col0, v);
    }
  } else {
#pragma unroll
    for (int e = 0; e < wht128::kPerLane; ++e) v[e] = __half2float(args.x[row * args.k + col0 + e]);
  }
}

// The linear's input transform of one 128-input block spread over the warp (4 values a lane, from
// input_values): the 128-point Hadamard, × 1/sqrt(128) (as exl3_input_transform_kernel, before its
// fp16 rounding). Every lane of the warp must call it.
__device__ __forceinline__ void transform_values(float (&v)[wht128::kPerLane], int lane) {
  wht128::transform(v, lane);
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) v[e] *= wht128::kScale;
}

// input_values, then for the linear transform_values: the lane's 4 values of the staged A before
// their fp16 rounding.
template <bool kLinear>
__device__ __forceinline__ void staged_values(const GemvArgs& args, const __half* suh, int row, int64_t col0, int lane,
                                              float (&v)[wht128::kPerLane], const float* norm_scales = nullptr) {
  input_values<kLinear>(args, suh, row, col0, v, norm_scales);
  if constexpr (kLinear) transform_values(v, lane);
}

// The fp16 kernel's staged A, in mma fragment order: for every 16-row block and tile, 128 words
// (fp16 pairs), 4 per lane, so that lane l reads its whole A fragment {a0, a1, a2, a3} with one
// 16-byte load (conflict-free: the warp reads 512 contiguous bytes). Lane l = 4g + t holds (row g,
// k 2t), (row g + 8, k 2t), (row g, k 2t + 8), (row g + 8, k 2t + 8), each with k + 1 in the high
// half. Rows >= m are zeros; m <= 8 still stages whole 16-row blocks (the upper half zero).
//
// The doubled layout (3INST and MCG with one m-block) stages two such fragments per tile: the
// first holds A's even k rows, the second its odd ones, each value in both halves of its word.
// The mma then sums over a k twice as long whose pairs are the two halves of one decoded word
// (lo·x + hi·x = (lo + hi)·x), so the decode skips pairing and adding the halves (§5).
__device__ __forceinline__ int fragment_half(int r, int kk) {  // r: row in the block, kk: k in the tile
  const int lane = 4 * (r % 8) + (kk % 8) / 2;
  const int j = r / 8 + 2 * (kk / 8);
  return 2 * (4 * lane + j) + (kk & 1);
}

// The doubled layout: the word of (r, kk), holding A[r, kk] twice.
__device__ __forceinline__ int doubled_word(int r, int kk) {
  const int lane = 4 * (r % 8) + (kk % 8) / 2;
  const int j = r / 8 + 2 * (kk / 8);
  return (kk & 1) * kFragmentWords + 4 * lane + j;
}

// Writes staged value h of (row r of its 16-row block, input kk of its tile) into the tile's words.
template <bool kDoubled>
__device__ __forceinline__ void put_staged(uint32_t* tile_words, int r, int kk, __half h) {
  if constexpr (kDoubled) {
    tile_words[doubled_word(r, kk)] = static_cast<uint32_t>(__half_as_ushort(h)) * 0x10001u;
  } else {
    reinterpret_cast<__half*>(tile_words)[fragment_half(r, kk)] = h;
  }
}

// Rounds the lane's 4 staged values (inputs kk0 .. kk0 + 3 of the tiles at `tiles`, row r of their
// 16-row block) to fp16, puts them in the staged layout and returns the lane's sum of the rounded
// values (MUL1's row sums).
template <bool kDoubled>
__device__ __forceinline__ float put_staged_values(uint32_t* tiles, int r, int kk0, const float (&v)[wht128::kPerLane]) {
  constexpr int kTileWords = staged_words_per_tile(kDoubled);
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    const int kk = kk0 + e;
    const __half h = __float2half_rn(v[e]);
    sum += __half2float(h);
    put_staged<kDoubled>(tiles + kk / trellis::kTileSize * kTileWords, r, kk % trellis::kTileSize, h);
  }
  return sum;
}

// Stores the warp's staged values v of (row, 128-input block `block`) of a k-input A in the fp16
// kernel's prestaged layout (`staged`: [m_blocks][k tiles][staged_words_per_tile]) and, with `sums`
// ([m][k / 128]), the row's sum of the rounded values for that block. Every lane of the warp.
template <bool kDoubled>
__device__ __forceinline__ void store_staged_block(uint32_t* staged, float* sums, int64_t k, int row, int64_t block,
                                                   int lane, const float (&v)[wht128::kPerLane]) {
  constexpr int kTileWords = staged_words_per_tile(kDoubled);
  constexpr int kBlockTiles = wht128::kBlock / trellis::kTileSize;
  const int64_t k_tiles = k / trellis::kTileSize;
  uint32_t* tiles = staged + ((row / 16) * k_tiles + block * kBlockTiles) * kTileWords;
  float sum = put_staged_values<kDoubled>(tiles, row % 16, wht128::kPerLane * lane, v);
  if (sums == nullptr) return;  // uniform over the warp
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  if (lane == 0) sums[row * (k / wht128::kBlock) + block] = sum;
}

// The staging of A ahead of the fp16 linear kernel: for each of its problems, x's transform
// (exactly the values the kernel would stage itself) over the whole k into its staged A (rows up
// to 16 · m_blocks, those >= m zero) and, with row_sums, every (row < m, 128-input block)'s sum of
// the staged values into its sums. One warp per (problem, row, block); a dependent launch.
struct GemvStageProblem {
  const __half* suh;
  uint32_t* staged;  // [m_blocks][k tiles][staged_words_per_tile]
  float* sums;       // [m][k / 128], with row_sums
};

struct GemvStageArgs {
  const __half* x;  // [m, in_features]
  int m;
  int m_blocks;
  int64_t in_features;
  int64_t k;
  int problems;
  bool doubled;
  bool row_sums;
  GemvStageProblem problem[kMaxProblems];
};

void launch_gemv_stage(const GemvStageArgs& args, cudaStream_t stream);

// The int8 kernel's input for the whole k (exl3_gemv_stage_int8.cu): per problem the staged q
// [m][k tiles][16] words into staged and the side tables into sums (GemvProblem::prestaged_sums'
// layout); m_blocks, doubled and row_sums are not read.
void launch_gemv_stage_int8(const GemvStageArgs& args, cudaStream_t stream);

}  // namespace exl3::gemv
