// The output pass of a linear_add that hands off the next RMSNorm (GemvNormHandoff, exl3_gemv.cuh):
// it sums the k-slices, finishes and adds into the residual as the kAddResidual pass does, and with
// the residual's new rows in hand does the next layer norm's work for the linears that read it:
// h = fp16(r · rsqrt(mean(r²) + eps) · w), then each consumer's input transform (⊙ suh, 128-point
// Hadamard) into the staged layout its GEMV takes (fp16 A, or int8 q and its scales), so that their
// matmul copies its slices instead of summing the row's squares and transforming it in every block.
//
// A row's mean needs all its columns: the row's outputs go to one thread block cluster (sm_90) of
// up to 8 blocks, each summing its columns' squares; the cluster barrier and a read of every
// block's sum from distributed shared memory (in rank order, the same total in every block) give
// the norm without another launch.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_gemv_output_common.cuh"
#include "kernels/cuda/exl3_wht128.cuh"

namespace exl3 {
namespace {

using namespace gemv_output;  // NOLINT: the pass's shared steps

constexpr int kWarpSize = 32;
// A block's warps, as the plain pass: blocks of 1024 threads (first built) could only start on an
// SM the matmul before had left entirely, and lost against the plain pass where they ran.
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kMaxCluster = 8;  // the portable cluster size
constexpr int64_t kBlock = wht128::kBlock;
// Warps a launch aims for (as the plain pass): outputs take fewer warps each once there are this
// many of them.
constexpr int64_t kTargetWarps = 4096;

// How a row's n / 128 outputs spread: `cluster` blocks of `outputs` outputs, `groups` warps each
// (groups · outputs = kWarps).
struct HandoffShape {
  int cluster = 0;
  int outputs = 0;
  int groups = 0;
};

// The most warps an output (8, 4, 2, 1) that leave a row's blocks within one cluster; then fewer
// where the slices or the launch's size (m rows) ask for fewer. cluster 0: none fits.
HandoffShape handoff_shape(int64_t m, int64_t n, int64_t slices) {
  HandoffShape s;
  if (n <= 0 || n % kBlock != 0) return s;
  const int64_t blocks = n / kBlock;
  const auto fits = [&](int groups) {
    const int outputs = kWarps / groups;
    return blocks % outputs == 0 && blocks / outputs <= kMaxCluster;
  };
  int groups = kWarps;
  while (groups >= 1 && !fits(groups)) groups /= 2;
  if (groups < 1) return s;
  while (groups > 1 && fits(groups / 2) && (groups > slices || m * blocks * groups > kTargetWarps)) groups /= 2;
  s.groups = groups;
  s.outputs = kWarps / groups;
  s.cluster = static_cast<int>(blocks / s.outputs);
  return s;
}

// The cluster's barrier, after which every block's shared memory written before it is visible to
// the cluster. The release and acquire are restricted to shared memory: a plain release
// (barrier.cluster.arrive.release) compiles to MEMBAR.ALL.GPU, which waits for the block's global
// stores (the residual) to reach L2 first; the restricted fence is a MEMBAR.ALL.CTA.
__device__ __forceinline__ void cluster_sync_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "fence.release.sync_restrict::shared::cta.cluster;\n\t"
      "barrier.cluster.arrive.relaxed.aligned;\n\t"
      "barrier.cluster.wait.aligned;\n\t"
      "fence.acquire.sync_restrict::shared::cluster.cluster;" ::: "memory");
#else
  __trap();
#endif
}

// The block's arrival at the cluster's exit barrier, once `used` (a value read from another
// block's shared memory) is in hand: no ordering of memory, only that the read is done, which the
// operand makes the arrival wait for. cluster_exit_wait() before the block leaves.
__device__ __forceinline__ void cluster_exit_arrive(float used) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned; // %0" ::"f"(used) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cluster_exit_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#else
  __trap();
#endif
}

// The float at `p` (this block's shared memory) in the cluster's block `rank`.
__device__ __forceinline__ float cluster_load(const float* p, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto local = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
#else
  __trap();
  return 0.0f;
#endif
}

// Consumer i's suh and staged words (selected field by field: no indexing into the parameters).
__device__ __forceinline__ const __half* consumer_suh(const GemvNormHandoff& h, int i) {
  return i == 0 ? h.suh[0] : i == 1 ? h.suh[1] : h.suh[2];
}
__device__ __forceinline__ uint32_t* consumer_staged(const GemvNormHandoff& h, int i) {
  return i == 0 ? h.staged[0] : i == 1 ? h.staged[1] : h.staged[2];
}

// Block b of the grid: row b / cluster, outputs (b % cluster) · outputs ... of it. Warp w: output
// w / groups, slices w % groups, ...; the output's first warp finishes it and adds it into the
// residual, and after the cluster's sum its warp g stages the input of consumers g, g + groups, ...
// for that 128-input block. kInt8: the int8 layout; kDoubled: fp16 in the doubled layout. Rows
// past m of an fp16 m-block are not written: their products are never stored.
template <bool kInt8, bool kDoubled>
__global__ void __launch_bounds__(kThreads)
    gemv_output_norm_kernel(GemvOutputArgs args, int cluster, int outputs, int groups) {
  allow_dependents();
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int local = warp / groups;
  const int group = warp % groups;
  const GemvOutput& o = args.output[0];
  const GemvNormHandoff& hf = args.handoff;
  const int64_t row = blockIdx.x / cluster;
  const int64_t block = static_cast<int64_t>(blockIdx.x % cluster) * outputs + local;
  const int64_t col0 = block * kBlock + wht128::kPerLane * lane;
  // Constants of the model, read before the kernels this one depends on have finished.
  ColumnScales scales{};
  if (group == 0) scales = column_scales(o, col0);
  // The norm weight and the first consumer's suh too (a later one's, where a warp stages several,
  // are read in turn).
  float weight[wht128::kPerLane] = {};
  __half suh[wht128::kPerLane] = {};
  if (group < hf.consumers) {
    const __half* first = consumer_suh(hf, group);
#pragma unroll
    for (int e = 0; e < wht128::kPerLane; ++e) {
      weight[e] = hf.norm_weight[col0 + e];
      suh[e] = first[col0 + e];
    }
  }
  wait_for_prerequisites();

  __shared__ float4 part[kWarps][kWarpSize];
  __shared__ float residual[kWarps][kBlock];  // the outputs' new residual values
  __shared__ float squares[kWarps];           // per output, Σ r² over its 128 columns
  __shared__ float block_squares;             // Σ over the block's outputs (read by the cluster)
  part[warp][lane] = slice_sum(o, args.m, args.slices, row, col0, group, groups);
  __syncthreads();
  if (group == 0) {
    float v[wht128::kPerLane];
    sum_of_groups(part, warp, lane, groups, v);
    finish(o, scales, col0, lane, v);
    float* y = static_cast<float*>(o.y) + row * o.n + col0;
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < wht128::kPerLane; ++e) {
      const float r = y[e] + v[e];
      y[e] = r;
      residual[local][wht128::kPerLane * lane + e] = r;
      sum += r * r;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
    if (lane == 0) squares[local] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int i = 0; i < outputs; ++i) sum += squares[i];
    block_squares = sum;
  }
  cluster_sync_shared();
  float total = 0.0f;
  for (int r = 0; r < cluster; ++r) total += cluster_load(&block_squares, static_cast<uint32_t>(r));
  // No block leaves while another may still read its block_squares: every block arrives once its
  // reads are done and waits at its end.
  cluster_exit_arrive(total);
  const float scale = 1.0f / sqrtf(total / static_cast<float>(o.n) + hf.eps);

  __half h[wht128::kPerLane];  // rms_norm's output, as the matmul's fused norm rounds it
#pragma unroll
  for (int e = 0; e < wht128::kPerLane; ++e) {
    h[e] = __float2half_rn(residual[local][wht128::kPerLane * lane + e] * scale * weight[e]);
  }
  for (int consumer = group; consumer < hf.consumers; consumer += groups) {  // uniform over the warp
    if (consumer != group) {
      const __half* next = consumer_suh(hf, consumer);
#pragma unroll
      for (int e = 0; e < wht128::kPerLane; ++e) suh[e] = next[col0 + e];
    }
    stage_input_block<kInt8, kDoubled>(hf.layout, consumer_staged(hf, consumer), args.m, o.n, row, block, lane, h,
                                       suh);
  }
  cluster_exit_wait();
}

template <bool kInt8, bool kDoubled>
void launch_instance(const GemvOutputArgs& args, const HandoffShape& s, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(args.m * s.cluster));
  config.blockDim = dim3(static_cast<unsigned>(kThreads));
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = static_cast<unsigned>(s.cluster);
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  attributes[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attributes;
  config.numAttrs = 2;
  EXL3_CUDA_CHECK(
      cudaLaunchKernelEx(&config, gemv_output_norm_kernel<kInt8, kDoubled>, args, s.cluster, s.outputs, s.groups));
}

}  // namespace

bool gemv_norm_handoff_fits(int64_t m, int64_t n, int consumers) {
  if (m < 1 || m > kGemvHandoffMaxRows || consumers < 1 || consumers > 3 || !dependent_launch_supported()) return false;
  return handoff_shape(m, n, 1).cluster > 0;
}

// Contract (EXL3_CHECK) beyond launch_gemv_output's: kAddResidual of one output whose
// out_features is its n, gemv_norm_handoff_fits, a layout for m rows of k = n, and the norm weight,
// every consumer's suh and staged words (16-byte aligned) set.
void launch_gemv_output_norm(const GemvOutputArgs& args, cudaStream_t stream) {
  const GemvOutput& o = args.output[0];
  const GemvNormHandoff& h = args.handoff;
  EXL3_CHECK(args.epilogue == GemvEpilogue::kAddResidual && args.outputs == 1 && o.out_features == o.n,
             "gemv norm hand-off: one linear into the residual, all n outputs");
  EXL3_CHECK(gemv_norm_handoff_fits(args.m, o.n, h.consumers), "gemv norm hand-off: ", args.m, " rows of ", o.n,
             " outputs for ", h.consumers, " linears");
  const GemvStagedLayout expect_int8 = gemv_staged_layout(args.m, o.n, Codebook::kMul1, true);
  const GemvStagedLayout expect_f16 =
      gemv_staged_layout(args.m, o.n, h.layout.row_sums ? Codebook::kMul1 : Codebook::k3Inst, false);
  const GemvStagedLayout& expect = h.layout.int8 ? expect_int8 : expect_f16;
  EXL3_CHECK(h.layout.m_blocks == expect.m_blocks && h.layout.doubled == expect.doubled &&
                 h.layout.staged_words == expect.staged_words && h.layout.side_words == expect.side_words,
             "gemv norm hand-off: a layout not for ", args.m, " rows of k = ", o.n);
  EXL3_CHECK(h.norm_weight != nullptr, "gemv norm hand-off: null norm weight");
  for (int i = 0; i < h.consumers; ++i) {
    EXL3_CHECK(h.suh[i] != nullptr && h.staged[i] != nullptr, "gemv norm hand-off: consumer ", i, ": null pointer");
    EXL3_CHECK(reinterpret_cast<uintptr_t>(h.staged[i]) % 16 == 0, "gemv norm hand-off: consumer ", i,
               ": staged words must be 16-byte aligned");
  }
  const HandoffShape s = handoff_shape(args.m, o.n, args.slices);
  if (h.layout.int8) {
    launch_instance<true, false>(args, s, stream);
  } else if (h.layout.doubled) {
    launch_instance<false, true>(args, s, stream);
  } else {
    launch_instance<false, false>(args, s, stream);
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
