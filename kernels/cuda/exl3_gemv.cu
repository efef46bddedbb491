// EXL3 matmul for few rows (m = 1..64; exl3-format.md §4, §5, §7). With so few rows the trellis
// decode, not the multiply, is the work, and on an H200 it is bound by instruction issue, not by
// memory (../shared/docs/hardware.md). So the loop spends as few instructions per weight as it can
// (docs/backend.md, "The few-rows EXL3 matmul"):
//   - every warp streams its n-tile's trellis words through a cp.async ring in shared memory
//     (exl3_gemv_layout.cuh) and walks its block's k-slice, n-tile after n-tile;
//   - each lane takes its 8 states of a tile (exl3_tile.cuh; for K = 4 and 8 byte permutes and
//     funnel shifts) and decodes them straight into mma.m16n8k16 B fragments: MUL1 as integer codes
//     (the affine map applied to the sums), 3INST/MCG as undivided halves against a doubled k;
//   - the products run on the tensor cores with fp32 sums, A fragments read from shared memory,
//     where the block staged its k-slice of A once.
// The linear variant copies that slice of A from the prestaged A (exl3_gemv_stage.cu, from 8
// rows on) or computes it itself from x (⊙ suh, 128-point Hadamard, fp16: exactly the input
// transform either way), and writes one partial product per k-slice for the output pass
// (exl3_gemv_output.cu) to sum: deterministic, no memset, no atomics. The bare variant
// (launch_exl3_gemv) reads A and adds its slices into a zeroed C with atomics. The launch shape
// comes from exl3_gemv_plan.h.
#include "kernels/cuda/exl3_gemv.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dynamic_shared_memory.cuh"
#include "kernels/cuda/exl3_gemv_common.cuh"
#include "kernels/cuda/exl3_gemv_layout.cuh"
#include "kernels/cuda/exl3_gemv_plan.h"
#include "kernels/cuda/exl3_tile.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3 {
namespace {

using namespace gemv;  // NOLINT: the layout constants and the planner

using trellis::kTileSize;

// The fused RMSNorm's rows: the kernels' norm scales, and only rows whose blocks stage A themselves.
static_assert(kGemvNormMaxRows == kMaxNormRows && kGemvNormMaxRows < kGemvPrestageMinRows);

// MUL1 (§5): value = fp16(h · KINV + KBIAS) with h = 1024 + byte sum, an integer that fp16 holds
// exactly. The mma multiplies A by h itself (products exact in fp32, sums in fp32) and the affine
// map is applied to the sums: Σ value·x = KINV · Σ h·x + KBIAS · Σ x. This skips the per-weight
// fused multiply-add and its rounding (the sums are slightly more accurate than with the rounded
// fp16 values).
constexpr float kMul1Inv = 0.00676727294921875f;  // fp16 0x1EEE
constexpr float kMul1Bias = -10.3828125f;         // fp16 0xC931

// MUL1's row sums of a staged slice: each row's sums of its `blocks` 128-input blocks
// (block_sums[r · row_stride + b]) added in block order into row_sums[r], rows < m of kMBlocks
// m-blocks; the same order for prestaged and self-staged slices, so the same bits run to run.
template <int kMBlocks>
__device__ __forceinline__ void add_row_block_sums(int m, int blocks, const float* block_sums, int64_t row_stride,
                                                   float* row_sums) {
  for (int r = static_cast<int>(threadIdx.x); r < m && r < 16 * kMBlocks; r += kThreads) {
    float sum = 0.0f;
    for (int b = 0; b < blocks; ++b) sum += block_sums[r * row_stride + b];
    row_sums[r] = sum;
  }
}

// The block's slice of A copied from the problem's prestaged A (launch_gemv_stage: its rows past m
// are zeros already), and for MUL1 every row's sum over the slice's blocks (in block order). The
// caller synchronises.
template <int kMBlocks, bool kDoubled, bool kRowSums>
__device__ __forceinline__ void copy_prestaged_slice(const GemvArgs& args, const GemvProblem& pr, int64_t tk0,
                                                     int num_tiles, uint32_t* staged, float* row_sums) {
  constexpr int kTileWords = staged_words_per_tile(kDoubled);
  const int64_t k_tiles = args.k / kTileSize;
  const int chunks = num_tiles * kTileWords / 4;  // uint4 per m-block
  constexpr int kInFlight = 4;
#pragma unroll
  for (int mb = 0; mb < kMBlocks; ++mb) {
    const uint4* src = reinterpret_cast<const uint4*>(pr.prestaged + (mb * k_tiles + tk0) * kTileWords);
    uint4* dst = reinterpret_cast<uint4*>(staged + mb * num_tiles * kTileWords);
    for (int first = static_cast<int>(threadIdx.x); first < chunks; first += kInFlight * kThreads) {
      uint4 v[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const int c = first + j * kThreads;
        if (c < chunks) v[j] = __ldg(src + c);
      }
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const int c = first + j * kThreads;
        if (c < chunks) dst[c] = v[j];
      }
    }
  }
  if constexpr (kRowSums) {
    const int64_t k_blocks = args.k / wht128::kBlock;
    const int64_t block0 = tk0 * kTileSize / wht128::kBlock;
    add_row_block_sums<kMBlocks>(args.m, num_tiles * kTileSize / wht128::kBlock, pr.prestaged_sums + block0, k_blocks,
                                 row_sums);
  }
}

// Stages the block's slice of A (zeros first, then rows < m; the caller synchronises) and, for
// MUL1, every row's sum of the staged values: with at most kOrderedRowSumMBlocks m-blocks each
// (row, 128-input block)'s sum into row_sums + 16 · kMBlocks (kMaxSliceBlocks a row), added in
// block order after one more barrier (add_row_block_sums); with more, into row_sums with atomics.
// Linear: A = fp16(had128(fp16(x ⊙ suh)) / sqrt(128)), inputs >= in_features as zero, one warp
// per (row, 128-input block), as exl3_input_transform_kernel. Bare: A copied.
template <int kMBlocks, bool kLinear, bool kDoubled, bool kRowSums>
__device__ __forceinline__ void stage_slice(const GemvArgs& args, const __half* suh, int64_t k0, int num_tiles,
                                            uint32_t* staged, float* row_sums, const float* norm_scales) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  constexpr int kTileWords = staged_words_per_tile(kDoubled);
  const int words = kMBlocks * num_tiles * kTileWords;
  for (int i = static_cast<int>(threadIdx.x); i < words / 4; i += kThreads) {
    reinterpret_cast<uint4*>(staged)[i] = make_uint4(0u, 0u, 0u, 0u);
  }
  constexpr bool kOrdered = kMBlocks <= kOrderedRowSumMBlocks;
  if constexpr (kRowSums && !kOrdered) {
    for (int i = static_cast<int>(threadIdx.x); i < 16 * kMBlocks; i += kThreads) row_sums[i] = 0.0f;
  }
  __syncthreads();
  const int rows = args.m < 16 * kMBlocks ? args.m : 16 * kMBlocks;
  const int blocks = num_tiles * kTileSize / wht128::kBlock;
  for (int job = warp; job < rows * blocks; job += kWarps) {  // uniform over the warp
    const int row = job / blocks;
    const int kk0 = (job % blocks) * wht128::kBlock + wht128::kPerLane * lane;
    float v[wht128::kPerLane];
    staged_values<kLinear>(args, suh, row, k0 + kk0, lane, v, norm_scales);
    float sum = put_staged_values<kDoubled>(staged + (row / 16) * num_tiles * kTileWords, row % 16, kk0, v);
    if constexpr (kRowSums) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
      if (lane == 0) {
        if constexpr (kOrdered) {
          row_sums[16 * kMBlocks + row * kMaxSliceBlocks + job % blocks] = sum;
        } else {
          atomicAdd(&row_sums[row], sum);
        }
      }
    }
  }
  if constexpr (kRowSums && kOrdered) {
    __syncthreads();
    add_row_block_sums<kMBlocks>(args.m, blocks, row_sums + 16 * kMBlocks, kMaxSliceBlocks, row_sums);
  }
}

// d += a · b for one m16n8k16 product, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int kBits, Codebook kCodebook, int kMBlocks, bool kLinear>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(kMBlocks)) exl3_gemv_kernel(GemvArgs args) {
  using Ring = TrellisRing<kBits>;
  constexpr int kWords = Ring::kWords;
  constexpr int kStageTiles = Ring::kTilesPerStage;
  static_assert(kSliceTiles % kStageTiles == 0);

  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int group = lane / 4;     // mma groupID: A/C row, B column
  const int in_group = lane % 4;  // mma threadID_in_group

  const GemvProblem pr = block_problem(args);
  const WarpWork work = warp_work(args, pr, warp);

  constexpr bool kDoubled = staged_doubled(kCodebook == Codebook::kMul1, kMBlocks);
  constexpr bool kMul1 = kCodebook == Codebook::kMul1;
  constexpr int kTileFrags = staged_words_per_tile(kDoubled) / 4;  // uint4 per staged tile
  __shared__ __align__(16) uint32_t ring[kWarps][ring_words(kBits)];
  extern __shared__ __align__(16) uint32_t staged[];  // staged_bytes(kMBlocks, tiles_per_slice, kDoubled)
  __shared__ float row_sums[kMul1 ? row_sum_words(kMBlocks) : 1];

  Ring stream(pr, work, ring[warp], lane);
  const int num_stages = stream.stages_per_tn * work.my_tiles_n;
  // The first stages (weights only) are in flight before the kernels this one depends on have
  // finished (dependent launch) and while the block stages its slice of A.
  allow_dependents();
  stream.prime(num_stages);
  wait_for_prerequisites();

  __shared__ float norm[kLinear ? kNormWords : 1];  // the fused RMSNorm's (args.norm_x)
  if (kLinear && pr.prestaged != nullptr) {
    copy_prestaged_slice<kMBlocks, kDoubled, kMul1>(args, pr, work.tk_begin, work.num_tiles, staged, row_sums);
  } else {
    if (kLinear && args.norm_x != nullptr) block_norm_scales(args, norm);
    stage_slice<kMBlocks, kLinear, kDoubled, kMul1>(args, pr.suh, work.tk_begin * kTileSize, work.num_tiles, staged,
                                                    row_sums, norm + kMaxNormRows * kWarps);
  }
  __syncthreads();

  const trellis::LaneWindow window = trellis::lane_window<kBits>(lane);
  const uint32_t* win0 = ring[warp] + window.word0;
  const uint32_t* win1 = ring[warp] + window.word1;
  const uint32_t* win2 = ring[warp] + window.word2;
  const uint4* const frags_begin = reinterpret_cast<const uint4*>(staged) + lane;
  const uint4* frags = frags_begin;
  const int num_tiles = work.num_tiles;
  float acc[kMBlocks][2][4];
#pragma unroll
  for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[mb][i / 4][i % 4] = 0.0f;
  }
  int64_t tn = work.first_tn;

  // C fragment: registers 0, 1 at (row group, columns 2·in_group + 0, 1), 2, 3 at row group + 8.
  const uint64_t keep = l2_evict_last_policy();
  const auto store = [&]() {
#pragma unroll
    for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t col = tn * kTileSize + half * 8 + 2 * in_group;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = mb * 16 + group + 8 * r;
          if (row >= args.m) continue;
          float v0 = acc[mb][half][2 * r], v1 = acc[mb][half][2 * r + 1];
          if constexpr (kMul1) {
            const float bias = kMul1Bias * row_sums[row];
            v0 = fmaf(kMul1Inv, v0, bias);
            v1 = fmaf(kMul1Inv, v1, bias);
          }
          if constexpr (kLinear) {
            float* out = pr.c + (static_cast<int64_t>(blockIdx.y) * args.m + row) * pr.n + col;
            store_with_policy(out, v0, v1, keep);
          } else {
            float* out = pr.c + row * pr.n + col;
            atomicAdd(out, v0);
            atomicAdd(out + 1, v1);
          }
        }
      }
    }
  };

  const auto consume = [&](int slot_words, int) {
#pragma unroll
    for (int i = 0; i < kStageTiles; ++i) {
      const int at = slot_words + i * kWords;
      uint32_t w[3] = {win0[at], win1[at], 0u};
      if constexpr (trellis::window_words<kBits>() > 2) w[2] = win2[at];
      uint32_t st[trellis::kPositionsPerLane];
      trellis::lane_states<kBits>(w, window.shift, st);
      if constexpr (kDoubled) {
        // Position j of the lane: k row 2t + (j & 1) + 8·(j >> 1 & 1), column group + 8·(j >> 2).
        uint32_t hv[trellis::kPositionsPerLane];
#pragma unroll
        for (int j = 0; j < trellis::kPositionsPerLane; ++j) hv[j] = trellis::decode_halves<kCodebook>(st[j]);
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const uint4 frag = frags[i * kTileFrags + odd * kWarpSize];
          const uint32_t a[4] = {frag.x, frag.y, frag.z, frag.w};
          mma_16816(acc[0][0], a, hv[odd], hv[odd + 2]);
          mma_16816(acc[0][1], a, hv[odd + 4], hv[odd + 6]);
        }
      } else {
        uint32_t b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          b[j] = kMul1 ? trellis::mul1_codes(st[2 * j], st[2 * j + 1])
                       : trellis::decode_pair<kCodebook>(st[2 * j], st[2 * j + 1]);
        }
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
          const uint4 frag = frags[(mb * num_tiles + i) * kTileFrags];
          const uint32_t a[4] = {frag.x, frag.y, frag.z, frag.w};
          mma_16816(acc[mb][0], a, b[0], b[1]);
          mma_16816(acc[mb][1], a, b[2], b[3]);
        }
      }
    }
    frags += kStageTiles * kTileFrags;
  };
  const auto end_tn = [&]() {
    store();
    frags = frags_begin;
    tn += work.slice_warps;
#pragma unroll
    for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[mb][i / 4][i % 4] = 0.0f;
    }
  };
  stream_stages(stream, num_stages, consume, end_tn);
}

// Shares the plan's blocks per slice out to the problems in proportion to their n-tiles (at least
// one each) and fills in block_begin / blocks.
int assign_blocks(GemvArgs& args, const GemvGrid& plan) {
  int64_t n_tiles[kMaxProblems] = {};
  for (int i = 0; i < args.problems; ++i) n_tiles[i] = args.problem[i].n / kTileSize;
  int64_t blocks[kMaxProblems] = {};
  split_blocks(plan.blocks_per_slice, std::span<const int64_t>(n_tiles, static_cast<size_t>(args.problems)),
               std::span<int64_t>(blocks, static_cast<size_t>(args.problems)));
  int begin = 0;
  for (int i = 0; i < args.problems; ++i) {
    args.problem[i].block_begin = begin;
    args.problem[i].blocks = static_cast<int>(blocks[i]);
    begin += static_cast<int>(blocks[i]);
  }
  return begin;
}

// One instance with its staged A (dynamic shared memory) sized for the launch's slices; the most
// any launch of it takes is allowed once per device.
template <int kBits, Codebook kCodebook, int kMBlocks, bool kLinear>
void launch_instance(const GemvArgs& args, dim3 grid, cudaStream_t stream) {
  constexpr bool kDoubled = staged_doubled(kCodebook == Codebook::kMul1, kMBlocks);
  allow_shared_bytes<exl3_gemv_kernel<kBits, kCodebook, kMBlocks, kLinear>>(
      static_cast<size_t>(staged_bytes(kMBlocks, max_tiles_per_slice(kBits, kMBlocks, kDoubled), kDoubled)));
  launch_dependent_smem(exl3_gemv_kernel<kBits, kCodebook, kMBlocks, kLinear>, grid, kThreads,
                        static_cast<size_t>(staged_bytes(kMBlocks, args.tiles_per_slice, kDoubled)), stream, args);
}

template <bool kLinear>
void launch(GemvArgs args, int bits, Codebook codebook, const GemvGrid& plan, cudaStream_t stream) {
  const int blocks = assign_blocks(args, plan);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(plan.slices));
  const bool known = trellis::dispatch_format(bits, codebook, [&]<int kBits, Codebook kCodebook>() {
    switch (m_blocks(args.m)) {
      case 1: launch_instance<kBits, kCodebook, 1, kLinear>(args, grid, stream); break;
      case 2: launch_instance<kBits, kCodebook, 2, kLinear>(args, grid, stream); break;
      case 3: launch_instance<kBits, kCodebook, 3, kLinear>(args, grid, stream); break;
      default: launch_instance<kBits, kCodebook, 4, kLinear>(args, grid, stream); break;
    }
  });
  EXL3_CHECK(known, "unknown codebook ", static_cast<int>(codebook));
  EXL3_CUDA_CHECK_LAUNCH();
}

void check_gemv_shape(int64_t m, int64_t k, int64_t n, int bits, int sm_count) {
  EXL3_CHECK(m >= 1 && m <= kGemvMaxRows, "m must be in 1..", kGemvMaxRows, ", got ", m);
  EXL3_CHECK(k > 0 && k % 128 == 0, "k must be a positive multiple of 128, got ", k);
  EXL3_CHECK(n > 0 && n % 128 == 0, "n must be a positive multiple of 128, got ", n);
  EXL3_CHECK(bits >= 1 && bits <= 8, "bits must be in 1..8, got ", bits);
  EXL3_CHECK(sm_count > 0, "sm_count must be positive, got ", sm_count);
  EXL3_CHECK(n / kTileSize <= std::numeric_limits<int32_t>::max(), "n too large: ", n);
  EXL3_CHECK(k / 16 * (n / 16) * 8 * bits <= std::numeric_limits<uint32_t>::max(), "trellis of k=", k, " n=", n,
             " K=", bits, " exceeds 2^32 words");
}

}  // namespace

void launch_exl3_gemv(const Exl3GemmParams& p, int sm_count, cudaStream_t stream) {
  check_gemv_shape(p.m, p.k, p.n, p.bits, sm_count);
  EXL3_CHECK(p.a != nullptr && p.trellis != nullptr && p.c != nullptr, "null pointer");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.trellis) % 16 == 0, "trellis must be 16-byte aligned");
  const GemvGrid plan =
      plan_grid(p.n / kTileSize, p.k / kTileSize, sm_count, bare_kernel_shape(p.m, p.bits, p.codebook), 65535);
  EXL3_CUDA_CHECK(cudaMemsetAsync(p.c, 0, static_cast<size_t>(p.m * p.n) * sizeof(float), stream));
  GemvArgs args{};
  args.x = p.a;
  args.m = static_cast<int>(p.m);
  args.in_features = p.k;
  args.k = p.k;
  args.tiles_per_slice = static_cast<int>(plan.tiles_per_slice);
  args.problems = 1;
  args.problem[0] = {nullptr, reinterpret_cast<const uint32_t*>(p.trellis), p.c, p.n, 0, 0};
  launch<false>(args, p.bits, p.codebook, plan, stream);
}

namespace {

// The grouped linear's common shape: x (or its fused RMSNorm), m, k, in_features, bits and codebook
// of every problem agree.
bool same_kind(std::span<const Exl3LinearParams> ps) {
  for (const Exl3LinearParams& p : ps) {
    if (p.m != ps[0].m || p.k != ps[0].k || p.in_features != ps[0].in_features || p.bits != ps[0].bits ||
        p.codebook != ps[0].codebook || p.x != ps[0].x || p.norm_x != ps[0].norm_x ||
        p.norm_weight != ps[0].norm_weight || p.norm_eps != ps[0].norm_eps) {
      return false;
    }
  }
  return true;
}

int64_t total_columns(std::span<const Exl3LinearParams> ps) {
  int64_t n = 0;
  for (const Exl3LinearParams& p : ps) n += p.n;
  return n;
}

// Carves ps[0].scratch_a into one region per problem, its staged words and then side_words words of
// side tables (16-byte aligned: both multiples of 4; none where side_words is 0), points the stage
// launch's problems and the matmul's at them and fills the launch's shared fields; false, with
// nothing changed, where scratch_a (scratch_a_halves, 0 = m·k) cannot hold them.
bool carve_prestage(std::span<const Exl3LinearParams> ps, int64_t staged_words, int64_t side_words, GemvStageArgs& s,
                    GemvArgs& args) {
  const Exl3LinearParams& p0 = ps[0];
  const int64_t problem_words = staged_words + side_words;
  const int64_t capacity = p0.scratch_a_halves > 0 ? p0.scratch_a_halves : p0.m * p0.k;
  if (static_cast<int64_t>(ps.size()) * problem_words * 2 > capacity) return false;
  s.x = p0.x;
  s.m = static_cast<int>(p0.m);
  s.in_features = p0.in_features;
  s.k = p0.k;
  s.problems = static_cast<int>(ps.size());
  auto* words = reinterpret_cast<uint32_t*>(p0.scratch_a);
  for (int i = 0; i < s.problems; ++i) {
    uint32_t* staged = words + i * problem_words;
    float* sides = side_words > 0 ? reinterpret_cast<float*>(staged + staged_words) : nullptr;
    s.problem[i] = {ps[static_cast<size_t>(i)].suh, staged, sides};
    args.problem[i].prestaged = staged;
    args.problem[i].prestaged_sums = sides;
  }
  return true;
}

// Stages A for the fp16 linear kernel into ps[0].scratch_a (per problem: the staged words, then
// for MUL1 the row sums) and points the problems at it. Where the rows are too few or scratch_a
// too small nothing is launched and the kernel's blocks stage their own slices.
void prestage(std::span<const Exl3LinearParams> ps, GemvArgs& args, cudaStream_t stream) {
  const Exl3LinearParams& p0 = ps[0];
  if (p0.m < kGemvPrestageMinRows || p0.scratch_a == nullptr || p0.norm_x != nullptr) return;
  const GemvStagedLayout layout = gemv_staged_layout(p0.m, p0.k, p0.codebook, false);
  GemvStageArgs s{};
  s.m_blocks = layout.m_blocks;
  s.doubled = layout.doubled;
  s.row_sums = layout.row_sums;
  if (carve_prestage(ps, layout.staged_words, layout.side_words, s, args)) launch_gemv_stage(s, stream);
}

// Stages the int8 kernel's q into ps[0].scratch_a (per problem: the staged words, then the two
// side tables) and points the problems at it, from kInt8PrestageMinRows rows on where scratch_a
// holds it (4 bytes an input a row; below that, or with the fused RMSNorm, the kernel's blocks
// quantize their own slices).
void prestage_int8(std::span<const Exl3LinearParams> ps, GemvArgs& args, cudaStream_t stream) {
  const Exl3LinearParams& p0 = ps[0];
  if (p0.m < kInt8PrestageMinRows || p0.scratch_a == nullptr || p0.norm_x != nullptr) return;
  const GemvStagedLayout layout = gemv_staged_layout(p0.m, p0.k, p0.codebook, true);
  GemvStageArgs s{};
  if (carve_prestage(ps, layout.staged_words, layout.side_words, s, args)) launch_gemv_stage_int8(s, stream);
}

// Points the problems at their hand-off inputs (Exl3LinearParams::staged_input: the staged words,
// then the side tables).
void take_staged_inputs(std::span<const Exl3LinearParams> ps, GemvArgs& args) {
  const Exl3LinearParams& p0 = ps[0];
  const GemvStagedLayout layout = gemv_staged_layout(p0.m, p0.k, p0.codebook, p0.int8_activations);
  for (int i = 0; i < args.problems; ++i) {
    const uint32_t* staged = ps[static_cast<size_t>(i)].staged_input;
    args.problem[i].prestaged = staged;
    args.problem[i].prestaged_sums =
        layout.side_words > 0 ? reinterpret_cast<const float*>(staged + layout.staged_words) : nullptr;
  }
}

}  // namespace

GemvStagedLayout gemv_staged_layout(int64_t m, int64_t k, Codebook codebook, bool int8_activations) {
  GemvStagedLayout l;
  l.int8 = int8_activations;
  const int64_t k_blocks = k / wht128::kBlock;
  if (int8_activations) {
    l.staged_words = m * (k / kTileSize) * 16;
    l.side_words = (2 * m * k_blocks + 3) / 4 * 4;
    return l;
  }
  l.m_blocks = m_blocks(m);
  l.doubled = staged_doubled(codebook == Codebook::kMul1, l.m_blocks);
  l.row_sums = codebook == Codebook::kMul1;
  l.staged_words = l.m_blocks * (k / kTileSize) * staged_words_per_tile(l.doubled);
  l.side_words = l.row_sums ? (m * k_blocks + 3) / 4 * 4 : 0;
  return l;
}

bool exl3_gemv_linears_fit(std::span<const Exl3LinearParams> ps, int64_t scratch_floats) {
  if (ps.empty() || static_cast<int>(ps.size()) > kMaxProblems || !same_kind(ps)) return false;
  const Exl3LinearParams& p = ps[0];
  if (p.m < 1 || p.m > kGemvMaxRows || p.k <= 0 || p.n <= 0) return false;
  if (p.int8_activations && (p.codebook != Codebook::kMul1 || p.m > kInt8MaxGroups * kInt8GroupRows)) return false;
  const int64_t k_tiles = p.k / kTileSize;
  // One-block stages allow the longest slices, so the fewest of them.
  const int max_tiles = gemv_kernel_shape(p.m, p.bits, p.codebook, p.int8_activations).max_tiles;
  const int64_t min_slices = (k_tiles + max_tiles - 1) / max_tiles;
  return scratch_floats >= min_slices * p.m * total_columns(ps);
}

namespace {

// The launch plan of fitting linears (exl3_gemv_linears_fit), as launch_exl3_gemv_linears makes it.
GemvGrid grouped_plan(std::span<const Exl3LinearParams> ps, int64_t scratch_floats, int sm_count) {
  const Exl3LinearParams& p0 = ps[0];
  const int64_t columns = total_columns(ps);
  const int64_t max_slices = std::min<int64_t>(65535, scratch_floats / (p0.m * columns));
  return plan_linear(columns / kTileSize, p0.k / kTileSize, p0.m, p0.bits, p0.codebook, p0.int8_activations, sm_count,
                     max_slices);
}

}  // namespace

bool exl3_gemv_linears_take_staged_input(std::span<const Exl3LinearParams> ps, int64_t scratch_floats) {
  return exl3_gemv_linears_fit(ps, scratch_floats) && ps[0].m <= kGemvHandoffMaxRows;
}

bool exl3_gemv_linear_fits(const Exl3LinearParams& p) {
  return exl3_gemv_linears_fit(std::span<const Exl3LinearParams>(&p, 1), std::max(p.scratch_c_floats, p.m * p.n));
}

void launch_exl3_gemv_linears(std::span<const Exl3LinearParams> ps, float* scratch, int64_t scratch_floats,
                              GemvEpilogue epilogue, int sm_count, cudaStream_t stream, const GemvRopeKv* rope,
                              const GemvNormHandoff* handoff, const GemvInputHandoff* input_handoff) {
  EXL3_CHECK(!ps.empty() && static_cast<int>(ps.size()) <= kMaxProblems, "1..", kMaxProblems, " linears, got ",
             ps.size());
  EXL3_CHECK(same_kind(ps), "grouped linears must share x (or its fused RMSNorm), m, k, in_features, bits and codebook");
  EXL3_CHECK(epilogue != GemvEpilogue::kSiluMul || ps.size() == 2, "silu-mul takes gate and up");
  const Exl3LinearParams& p0 = ps[0];
  for (const Exl3LinearParams& p : ps) {
    check_gemv_shape(p.m, p.k, p.n, p.bits, sm_count);
    EXL3_CHECK(reinterpret_cast<uintptr_t>(p.trellis) % 16 == 0, "trellis must be 16-byte aligned");
  }
  EXL3_CHECK(p0.norm_x == nullptr || (p0.norm_weight != nullptr && p0.m <= kGemvNormMaxRows),
             "the fused RMSNorm takes its weight and at most ", kGemvNormMaxRows, " rows, got ", p0.m);
  const bool int8 = p0.int8_activations;
  EXL3_CHECK(!int8 || (p0.codebook == Codebook::kMul1 && p0.m <= kInt8MaxGroups * kInt8GroupRows),
             "int8 activations take MUL1 weights and at most ", kInt8MaxGroups * kInt8GroupRows, " rows, got codebook ",
             static_cast<int>(p0.codebook), " and ", p0.m, " rows");
  const bool staged_input = p0.staged_input != nullptr;
  for (const Exl3LinearParams& p : ps) {
    EXL3_CHECK(p.int8_activations == int8, "grouped linears must agree on int8 activations");
    EXL3_CHECK((p.staged_input != nullptr) == staged_input, "grouped linears must all take staged inputs or none");
  }
  EXL3_CHECK(!staged_input || (p0.norm_x == nullptr && p0.m <= kGemvHandoffMaxRows), "staged inputs take at most ",
             kGemvHandoffMaxRows, " rows and no fused RMSNorm, got ", p0.m);
  EXL3_CHECK(handoff == nullptr || (epilogue == GemvEpilogue::kAddResidual && ps.size() == 1),
             "a norm hand-off follows one linear into the residual");
  EXL3_CHECK(input_handoff == nullptr || epilogue == GemvEpilogue::kSiluMul,
             "an input hand-off follows a gated product");
  const int64_t columns = total_columns(ps);
  const int64_t max_slices = std::min<int64_t>(65535, scratch_floats / (p0.m * columns));
  const GemvGrid plan = grouped_plan(ps, scratch_floats, sm_count);
  EXL3_CHECK(plan.slices >= 1 && plan.slices <= max_slices, "scratch (", scratch_floats,
             " floats) cannot hold the partial products of [", p0.m, ", ", columns, "] these linears need");
  GemvArgs args{};
  args.x = p0.x;
  args.m = static_cast<int>(p0.m);
  args.in_features = p0.in_features;
  args.k = p0.k;
  args.tiles_per_slice = static_cast<int>(plan.tiles_per_slice);
  args.problems = static_cast<int>(ps.size());
  args.norm_x = p0.norm_x;
  args.norm_weight = p0.norm_weight;
  args.norm_eps = p0.norm_eps;
  float* partials = scratch;
  GemvOutputArgs out{};
  out.m = p0.m;
  out.slices = plan.slices;
  out.outputs = args.problems;
  out.epilogue = epilogue;
  if (epilogue == GemvEpilogue::kRopeKvWrite) {
    EXL3_CHECK(rope != nullptr, "the rope/cache epilogue needs its positions and cache");
    out.rope = *rope;
  }
  for (int i = 0; i < args.problems; ++i) {
    const Exl3LinearParams& p = ps[static_cast<size_t>(i)];
    args.problem[i] = {p.suh, reinterpret_cast<const uint32_t*>(p.trellis), partials, p.n, 0, 0};
    out.output[i] = {partials, p.svh, p.bias, p.y, p.y_f32, p.n, p.out_features};
    partials += plan.slices * p.m * p.n;
  }
  if (handoff != nullptr) {
    out.norm_handoff = true;
    out.handoff = *handoff;
  }
  if (input_handoff != nullptr) {
    out.input_handoff = true;
    out.next_input = *input_handoff;
  }
  if (staged_input) take_staged_inputs(ps, args);
  if (int8) {
    const int blocks = assign_blocks(args, plan);
    if (!staged_input) prestage_int8(ps, args, stream);
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(plan.slices));
    launch_exl3_gemv_int8(args, p0.bits, grid, stream);
  } else {
    if (!staged_input) prestage(ps, args, stream);
    launch<true>(args, p0.bits, p0.codebook, plan, stream);
  }
  launch_gemv_output(out, stream);
}

void launch_exl3_gemv_linear(const Exl3LinearParams& p, int sm_count, cudaStream_t stream) {
  launch_exl3_gemv_linears(std::span<const Exl3LinearParams>(&p, 1), p.scratch_c,
                           std::max(p.scratch_c_floats, p.m * p.n), GemvEpilogue::kStore, sm_count, stream);
}

}  // namespace exl3
