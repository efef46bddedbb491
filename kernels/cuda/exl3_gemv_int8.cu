// The few-rows EXL3 matmul with int8 activations (kernels/int8_activations.h; the spec is
// kernels/ref/int8_activations_ref.cpp): MUL1 weights, m = 1..32 rows.
//
// A MUL1 weight is value = KINV·(1024 + t) + KBIAS with t the byte sum of s·0x83DCD12D (§5). So
// Σ value·q over a block of quantized inputs q is KINV·Σ t·q + (1024·KINV + KBIAS)·Σ q, and
// Σ t·q = Σ over the 4 bytes b of s·0x83DCD12D of b·q: an int8 tensor-core product
// (mma.m16n8k32, u8 × s8 → s32) whose A operand is the multiplied state itself, 4 bytes per
// weight, and whose B operand is q repeated in 4 bytes. Per weight a lane spends the state
// extraction (as the fp16 kernel), one IMAD, and a quarter of an mma; no byte sum, no conversion
// to fp16, no per-weight pairing.
//
// Roles are the transpose of the fp16 kernel's: the 16 output columns of an n-tile are the mma's
// M, the rows of x its N (8 per group, up to 4 groups), the tile's 16 inputs two k32 products of 8
// inputs each. The trellis layout (§4.4) puts lane l = 4g + t's states at output columns g, g + 8
// and inputs 2t, 2t + 1, 2t + 8, 2t + 9, which is an A fragment once the inputs of each product
// are ordered as below; the staged B holds the matching q.
//
// Each warp streams its n-tiles' trellis words through the cp.async ring of the fp16 kernel
// (exl3_gemv_common.cuh), one 128-input block (the quantization block) per stage: a block's integer
// sums start from zero in its first product and are scaled into fp32 sums at its end; a per-row
// bias, the sums' start, carries the Σ q term. Only the m real rows of q are staged (lanes of rows
// past m read the last row and their sums are dropped), so shared memory, sized per launch, and
// with it the blocks an SM holds, follow m. From kInt8PrestageMinRows rows the quantized input of
// the whole k comes prestaged (exl3_gemv_stage_int8.cu), or from 2 rows handed off by the
// linear_add before it (exl3_gemv_output_norm.cu), and the blocks copy their slices of it. The
// block writes one partial product per k-slice, summed by the output pass (exl3_gemv_output.cu) as
// for the fp16 kernel.
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dynamic_shared_memory.cuh"
#include "kernels/cuda/exl3_gemv_common.cuh"
#include "kernels/cuda/exl3_gemv_int8_quant.cuh"
#include "kernels/cuda/exl3_gemv_layout.cuh"
#include "kernels/cuda/exl3_tile.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3::gemv {
namespace {

using trellis::kTileSize;

static_assert(wht128::kBlock == kSliceTiles * kTileSize, "a stage is one 128-input block");

// The block's shared memory beside the (static) rings, carved from the dynamic allocation:
// int8_smem_words less the rings.
struct Int8Smem {
  uint32_t* staged;   // [m][row_words]
  float* scale;       // [groups][kMaxSliceBlocks][kInt8GroupRows]: the block's scale · KINV
  float* qsum;        // same shape: the block's scale · Σ q
  float* row_bias;    // [groups · kInt8GroupRows]: kMul1Offset · Σ over blocks of qsum
  int row_words;
};

__device__ __forceinline__ int side_index(int row, int block) {
  return ((row / kInt8GroupRows) * kMaxSliceBlocks + block) * kInt8GroupRows + row % kInt8GroupRows;
}

// Quantizes the block's slice of x's transform (exactly the fp16 kernel's staged values, then per
// 128-input block of a row quantize_int8_block) into the staged q and the side tables. One warp
// per (row, block). A block with a NaN or infinite input gets a NaN scale, so the row's outputs are
// NaN, as the fp16 path's would be.
template <int kGroups>
__device__ __forceinline__ void stage_slice_int8(const GemvArgs& args, const __half* suh, int64_t k0, int num_tiles,
                                                 const Int8Smem& sm, const float* norm_scales) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  for (int i = static_cast<int>(threadIdx.x); i < kGroups * kMaxSliceBlocks * kInt8GroupRows; i += kThreads) {
    sm.scale[i] = 0.0f;
    sm.qsum[i] = 0.0f;
  }
  __syncthreads();
  const int blocks = num_tiles / kSliceTiles;
  const int jobs = args.m * blocks;
  // A warp's jobs are job = warp + kWarps·i; their loads are issued kJobBatch at a time before any
  // of them is transformed, so that a warp waits for memory once per batch, not once per job.
  constexpr int kJobBatch = 4;
  for (int first = warp; first < jobs; first += kWarps * kJobBatch) {  // uniform over the warp
    float v[kJobBatch][wht128::kPerLane];
#pragma unroll
    for (int b = 0; b < kJobBatch; ++b) {
      const int job = first + b * kWarps;
      if (job < jobs) {
        input_values<true>(args, suh, job / blocks, k0 + (job % blocks) * wht128::kBlock + wht128::kPerLane * lane,
                           v[b], norm_scales);
      }
    }
#pragma unroll
    for (int b = 0; b < kJobBatch; ++b) {
      const int job = first + b * kWarps;
      if (job >= jobs) break;
      const int row = job / blocks;
      const int block = job % blocks;
      const int kk0 = block * wht128::kBlock + wht128::kPerLane * lane;
      transform_values(v[b], lane);
      const Int8Block q = quantize_int8_block(v[b], lane, kk0, sm.staged + row * sm.row_words);
      if (lane == 0) {
        sm.scale[side_index(row, block)] = q.scale * kMul1Inv;
        sm.qsum[side_index(row, block)] = q.scale * static_cast<float>(q.qsum);
      }
    }
  }
}

// The block's slice of the prestaged q (launch_gemv_stage_int8: the whole k, row r's words at
// r · k_tiles · 16, then the scale · KINV and the scale · Σ q of every (row, 128-input block))
// copied into the staged q and the side tables (zeros for the group's rows past m). The caller
// synchronises.
template <int kGroups>
__device__ __forceinline__ void copy_prestaged_slice_int8(const GemvArgs& args, const GemvProblem& pr, int64_t tk0,
                                                          int num_tiles, const Int8Smem& sm) {
  const int64_t k_tiles = args.k / kTileSize;
  const int chunks = num_tiles * 4;  // uint4 a row
  const int total = args.m * chunks;
  constexpr int kInFlight = 4;
  for (int first = static_cast<int>(threadIdx.x); first < total; first += kInFlight * kThreads) {
    uint4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int c = first + j * kThreads;
      if (c < total) {
        v[j] = __ldg(reinterpret_cast<const uint4*>(pr.prestaged + ((c / chunks) * k_tiles + tk0) * 16) + c % chunks);
      }
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int c = first + j * kThreads;
      if (c < total) reinterpret_cast<uint4*>(sm.staged + (c / chunks) * sm.row_words)[c % chunks] = v[j];
    }
  }
  const int64_t k_blocks = args.k / wht128::kBlock;
  const int64_t block0 = tk0 / kSliceTiles;
  const int blocks = num_tiles / kSliceTiles;
  const float* scales = pr.prestaged_sums;
  const float* qsums = pr.prestaged_sums + args.m * k_blocks;
  for (int i = static_cast<int>(threadIdx.x); i < kGroups * kInt8GroupRows * blocks; i += kThreads) {
    const int row = i / blocks;
    const int block = i % blocks;
    const bool real = row < args.m;
    const int64_t at = row * k_blocks + block0 + block;
    sm.scale[side_index(row, block)] = real ? __ldg(scales + at) : 0.0f;
    sm.qsum[side_index(row, block)] = real ? __ldg(qsums + at) : 0.0f;
  }
}

// A row's bias over the slice's blocks (in block order), from the side tables.
__device__ __forceinline__ float row_bias(int row, int blocks, const Int8Smem& sm) {
  float sum = 0.0f;
  for (int b = 0; b < blocks; ++b) sum += sm.qsum[side_index(row, b)];
  return kMul1Offset * sum;
}

// Each row's bias into sm.row_bias; the caller synchronises before and after.
__device__ __forceinline__ void sum_row_biases(int m, int blocks, const Int8Smem& sm) {
  for (int r = static_cast<int>(threadIdx.x); r < m; r += kThreads) sm.row_bias[r] = row_bias(r, blocks, sm);
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint4 lds128(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(address));
  return v;
}

__device__ __forceinline__ float lds32f(uint32_t address) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(address));
  return v;
}

__device__ __forceinline__ float2 lds64f(uint32_t address) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(address));
  return v;
}

// d = a · b + c for one m16n8k32 product: a u8 (16 x 32), b s8 (32 x 8), s32 sums.
__device__ __forceinline__ void mma_16832_u8s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                               const int (&c)[4]) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

template <int kBits>
using Int8Ring = TrellisRing<kBits, kSliceTiles, int8_ring_slots(kBits)>;

// kPrestaged: the problems' q is prestaged (GemvProblem::prestaged; its own instance, so that the
// few-rows instances keep the registers of one prologue). kOneRow: m is 1, so of each C fragment
// only the even rows' sums (2t: registers 0 and 2) are real and the odd ones are neither added,
// scaled nor stored (6 of a 128-input stage's ~230 instructions), and the lanes that store the
// row sum its bias themselves (docs/backend.md, "The int8 GEMV at one row").
template <int kBits, int kGroups, bool kPrestaged, bool kOneRow>
__global__ void __launch_bounds__(kThreads, int8_blocks_per_sm(kGroups)) exl3_gemv_int8_kernel(GemvArgs args) {
  static_assert(!kOneRow || kGroups == 1);
  using Ring = Int8Ring<kBits>;
  constexpr int kWords = Ring::kWords;
  static_assert(Ring::kRingWords == int8_ring_words(kBits));

  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int g = lane / 4;  // mma groupID: output columns g, g + 8 of the tile; B's row of x
  const int t = lane % 4;  // mma threadID_in_group: rows 2t, 2t + 1 of each group in the sums

  const GemvProblem pr = block_problem(args);
  const WarpWork work = warp_work(args, pr, warp);

  // The rings have a fixed size (static, so their addresses are constants); staged q and the side
  // tables follow m and the slice length (dynamic).
  __shared__ __align__(16) uint32_t rings[kWarps][Ring::kRingWords];
  extern __shared__ __align__(16) uint32_t smem[];
  Int8Smem sm;
  sm.row_words = int8_row_words(args.tiles_per_slice);
  sm.staged = smem;
  sm.scale = reinterpret_cast<float*>(sm.staged + args.m * sm.row_words);
  sm.qsum = sm.scale + kGroups * kMaxSliceBlocks * kInt8GroupRows;
  sm.row_bias = sm.qsum + kGroups * kMaxSliceBlocks * kInt8GroupRows;
  float* const norm = sm.row_bias + kGroups * kInt8GroupRows;  // kNormWords: the fused RMSNorm's
  uint32_t* const ring = rings[warp];

  Ring stream(pr, work, ring, lane);
  const int num_stages = stream.stages_per_tn * work.my_tiles_n;
  // The first stages (weights only) are in flight before the kernels this one depends on have
  // finished (dependent launch) and while the block stages its slice of x.
  allow_dependents();
  stream.prime(num_stages);
  wait_for_prerequisites();

  if constexpr (kPrestaged) {
    copy_prestaged_slice_int8<kGroups>(args, pr, work.tk_begin, work.num_tiles, sm);
  } else {
    if (args.norm_x != nullptr) block_norm_scales(args, norm);
    stage_slice_int8<kGroups>(args, pr.suh, work.tk_begin * kTileSize, work.num_tiles, sm,
                              norm + kMaxNormRows * kWarps);
  }
  __syncthreads();
  // One row: the lanes that store it sum its bias themselves, no second barrier. More rows: one
  // thread a row, then a barrier (every lane summing its own rows measured slower at 2-4 rows).
  if constexpr (!kOneRow) {
    sum_row_biases(args.m, work.num_tiles / kSliceTiles, sm);
    __syncthreads();
  }

  const trellis::LaneWindow window = trellis::lane_window<kBits>(lane);
  const uint32_t* win0 = ring + window.word0;
  const uint32_t* win1 = ring + window.word1;
  const uint32_t* win2 = ring + window.word2;
  // Each group's B: this lane's row (the last real row past m: those sums are dropped).
  // Kept as shared-space addresses: generic pointers into the dynamic allocation would be
  // recomputed from the block's shared window at every stage.
  uint32_t rows[kGroups];
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
    const int row = min(grp * kInt8GroupRows + g, args.m - 1);
    rows[grp] = shared_address(sm.staged + row * sm.row_words + 4 * t);
  }
  // This lane's rows 2t, 2t + 1 in the scale table (group and block added per use).
  const uint32_t lane_scales = shared_address(sm.scale + 2 * t);
  // This lane's rows' biases (zero past m: those rows are never stored) and whether it stores
  // them, fixed over the slice; the sums of every n-tile start from the bias.
  float bias[kGroups][2];
  bool stores[kGroups][2];
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = grp * kInt8GroupRows + 2 * t + r;
      stores[grp][r] = row < args.m;
      if (!stores[grp][r]) {
        bias[grp][r] = 0.0f;
      } else {
        bias[grp][r] = kOneRow ? row_bias(row, work.num_tiles / kSliceTiles, sm) : sm.row_bias[row];
      }
    }
  }
  float acc[kGroups][4];  // scaled sums of the slice; C fragment: 0, 1 at (column g, rows 2t, 2t + 1), 2, 3 at g + 8
  const auto start_sums = [&]() {
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[grp][i] = bias[grp][i % 2];
    }
  };
  start_sums();
  // This lane's partial products: rows 2t, 2t + 1 of each group at column g of its current n-tile
  // (and g + 8), advanced n-tile by n-tile (rows past m are never stored).
  float* out = pr.c + (static_cast<int64_t>(blockIdx.y) * args.m + 2 * t) * pr.n + work.first_tn * kTileSize + g;
  const int kZero[4] = {0, 0, 0, 0};
  const uint64_t keep = l2_evict_last_policy();

  // One group of rows has a single chain of dependent products a block (16 at 8 tiles), each
  // waiting for the last; it keeps a second set of sums for the tiles' second products (two chains
  // of 8), added as integers at the block's end, so its sums are the same. More groups interleave
  // their own chains; at K 6-8 the second set would spill (64 registers).
  constexpr bool kTwoChains = kGroups == 1 && kBits <= 5;
  // The stage in slot_words is the n-tile's block-th 128-input block of the slice.
  const auto consume = [&](int slot_words, int block) {
    int sums[kGroups][4];  // this block's integer sums
    int sums_high[4];  // kTwoChains: the second products' sums
#pragma unroll
    for (int i = 0; i < kSliceTiles; ++i) {
      const int at = slot_words + i * kWords;
      uint32_t w[3] = {win0[at], win1[at], 0u};
      if constexpr (trellis::window_words<kBits>() > 2) w[2] = win2[at];
      uint32_t st[trellis::kPositionsPerLane];
      trellis::lane_states<kBits>(w, window.shift, st);
      uint32_t code[trellis::kPositionsPerLane];
#pragma unroll
      for (int j = 0; j < trellis::kPositionsPerLane; ++j) code[j] = st[j] * kMul1Multiplier;
      // State j sits at output column g + 8·(j >> 2), input 2t + (j & 1) + 8·(j >> 1 & 1). The first
      // product takes inputs 2t (its k slot t) and 2t + 1 (slot 4 + t), the second 2t + 8, 2t + 9:
      // A registers {column g slot t, column g + 8 slot t, column g slot 4 + t, column g + 8 slot 4 + t}.
      const uint32_t a_low[4] = {code[0], code[4], code[1], code[5]};
      const uint32_t a_high[4] = {code[2], code[6], code[3], code[7]};
#pragma unroll
      for (int grp = 0; grp < kGroups; ++grp) {
        const uint4 frag = lds128(rows[grp] + static_cast<uint32_t>((block * kSliceTiles + i) * 64));
        if (i == 0) {
          mma_16832_u8s8(sums[grp], a_low, frag.x, frag.y, kZero);  // the block's sums start here
        } else {
          mma_16832_u8s8(sums[grp], a_low, frag.x, frag.y, sums[grp]);
        }
        if constexpr (kTwoChains) {
          if (i == 0) {
            mma_16832_u8s8(sums_high, a_high, frag.z, frag.w, kZero);
          } else {
            mma_16832_u8s8(sums_high, a_high, frag.z, frag.w, sums_high);
          }
        } else {
          mma_16832_u8s8(sums[grp], a_high, frag.z, frag.w, sums[grp]);
        }
      }
    }
    if constexpr (kTwoChains) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (!kOneRow || e % 2 == 0) sums[0][e] += sums_high[e];
      }
    }
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
      const uint32_t scales = lane_scales + static_cast<uint32_t>((grp * kMaxSliceBlocks + block) * kInt8GroupRows * 4);
      if constexpr (kOneRow) {
        const float s = lds32f(scales);
        acc[grp][0] = fmaf(s, static_cast<float>(sums[grp][0]), acc[grp][0]);
        acc[grp][2] = fmaf(s, static_cast<float>(sums[grp][2]), acc[grp][2]);
      } else {
        const float2 s = lds64f(scales);
        acc[grp][0] = fmaf(s.x, static_cast<float>(sums[grp][0]), acc[grp][0]);
        acc[grp][1] = fmaf(s.y, static_cast<float>(sums[grp][1]), acc[grp][1]);
        acc[grp][2] = fmaf(s.x, static_cast<float>(sums[grp][2]), acc[grp][2]);
        acc[grp][3] = fmaf(s.y, static_cast<float>(sums[grp][3]), acc[grp][3]);
      }
    }
  };
  const auto end_tn = [&]() {
#pragma unroll
    for (int grp = 0; grp < kGroups; ++grp) {
#pragma unroll
      for (int r = 0; r < (kOneRow ? 1 : 2); ++r) {
        if (!stores[grp][r]) continue;
        float* row_out = out + (grp * kInt8GroupRows + r) * pr.n;
        store_with_policy(row_out, acc[grp][r], keep);
        store_with_policy(row_out + 8, acc[grp][2 + r], keep);
      }
    }
    start_sums();
    out += work.slice_warps * kTileSize;
  };
  stream_stages(stream, num_stages, consume, end_tn);
}

// The kernel for m rows at K = kBits, with the most dynamic shared memory any launch of it takes
// allowed (above 48 KiB it must be opted into, once per device).
template <int kBits, int kGroups, bool kPrestaged, bool kOneRow = false>
void launch_instance(const GemvArgs& args, dim3 grid, size_t smem_bytes, cudaStream_t stream) {
  constexpr auto kernel = exl3_gemv_int8_kernel<kBits, kGroups, kPrestaged, kOneRow>;
  allow_shared_bytes<kernel>(static_cast<size_t>(int8_smem_cap_words(kGroups) - kWarps * int8_ring_words(kBits)) * 4);
  launch_dependent_smem(kernel, grid, kThreads, smem_bytes, stream, args);
}

template <int kBits, int kGroups, bool kOneRow = false>
void launch_groups(const GemvArgs& args, dim3 grid, size_t smem_bytes, cudaStream_t stream) {
  if (args.problem[0].prestaged != nullptr) {
    launch_instance<kBits, kGroups, true, kOneRow>(args, grid, smem_bytes, stream);
  } else {
    launch_instance<kBits, kGroups, false, kOneRow>(args, grid, smem_bytes, stream);
  }
}

template <int kBits>
void launch_bits(const GemvArgs& args, dim3 grid, size_t smem_bytes, cudaStream_t stream) {
  switch (int8_groups_of(args.m)) {
    case 1:
      if (args.m == 1) {
        launch_groups<kBits, 1, true>(args, grid, smem_bytes, stream);
      } else {
        launch_groups<kBits, 1>(args, grid, smem_bytes, stream);
      }
      break;
    case 2:
      launch_groups<kBits, 2>(args, grid, smem_bytes, stream);
      break;
    case 3:
      launch_groups<kBits, 3>(args, grid, smem_bytes, stream);
      break;
    default:
      launch_groups<kBits, 4>(args, grid, smem_bytes, stream);
      break;
  }
}

}  // namespace

void launch_exl3_gemv_int8(const GemvArgs& args, int bits, dim3 grid, cudaStream_t stream) {
  EXL3_CHECK(args.m >= 1 && args.m <= kInt8MaxGroups * kInt8GroupRows, "int8 GEMV: m must be in 1..",
             kInt8MaxGroups * kInt8GroupRows, ", got ", args.m);
  EXL3_CHECK(bits >= 1 && bits <= 8, "int8 GEMV: bits must be in 1..8, got ", bits);
  EXL3_CHECK(args.tiles_per_slice % kSliceTiles == 0 && args.tiles_per_slice <= max_tiles_per_slice_int8(bits, args.m),
             "int8 GEMV: ", args.tiles_per_slice, " tiles per slice");
  // The dynamic part: all but the rings.
  const size_t smem_bytes =
      static_cast<size_t>(int8_smem_words(bits, args.m, args.tiles_per_slice) - kWarps * int8_ring_words(bits)) * 4;
  switch (bits) {
    case 1: launch_bits<1>(args, grid, smem_bytes, stream); break;
    case 2: launch_bits<2>(args, grid, smem_bytes, stream); break;
    case 3: launch_bits<3>(args, grid, smem_bytes, stream); break;
    case 4: launch_bits<4>(args, grid, smem_bytes, stream); break;
    case 5: launch_bits<5>(args, grid, smem_bytes, stream); break;
    case 6: launch_bits<6>(args, grid, smem_bytes, stream); break;
    case 7: launch_bits<7>(args, grid, smem_bytes, stream); break;
    case 8: launch_bits<8>(args, grid, smem_bytes, stream); break;
    default: break;
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3::gemv
