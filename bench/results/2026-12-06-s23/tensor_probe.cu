// Session 23 probe (a record of the run, not product code): is the int8 tensor-core product of
// the few-rows EXL3 matmul limited by mma.sync on Hopper, and would warpgroup products (wgmma,
// sm_90a) lift that limit at 32 rows? The int8 GEMV (kernels/cuda/exl3_gemv_int8.cu) feeds each
// weight's multiplied state as 4 u8 bytes of an A operand, so at 32 rows a 256-weight tile costs 8
// mma.m16n8k32 u8.s8 (4 groups of 8 rows x 2 products); session 11 measured it slower than the
// fp16 path past 8 rows. This probe
//   1. checks a wgmma.m64n32k32.s32.u8.s8 with A in registers (each warp's 16 rows in the
//      mma.m16n8k32 A fragment order) and B (32 x 32, K-major, no swizzle: 8-row x 16-byte core
//      matrices) in shared memory against a host product, for both readings of the descriptor's
//      two byte offsets, and the accumulator fragment order (each 8-column chunk as mma's C);
//   2. times the issue-bound rate of mma.sync m16n8k32 u8.s8, mma.sync m16n8k16 f16 and
//      wgmma m64n32k32 u8.s8 (register A) over every SM, as multiply-adds per clock per SM.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o tensor-probe tensor_probe.cu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define PROBE_CHECK(expr)                                                                   \
  do {                                                                                      \
    const cudaError_t e_ = (expr);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #expr, cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                               \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

constexpr int kM = 64, kN = 32, kK = 32;  // one wgmma: A 64 x 32 u8, B 32 x 32 s8 (K x N)

// The shared-memory matrix descriptor of sm_90 (start, leading and stride byte offsets in 16-byte
// units; swizzle 0 = none).
__device__ uint64_t smem_descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((address >> 4) & 0x3FFF);
  d |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// d (+)= a · B for the warpgroup: a this warp's A fragment, B through `desc`; accumulate 0 starts
// from zero.
__device__ __forceinline__ void wgmma_u8s8_m64n32k32(int (&d)[16], const uint32_t (&a)[4], uint64_t desc,
                                                    int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.s32.u8.s8 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}

__device__ __forceinline__ void mma_16832_u8s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_16816_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// B (k, n) at byte offset of its core matrix (k / 16 along K, n / 8 along N) plus row n % 8 x 16
// + k % 16. Core matrices adjacent in K are kKStride bytes apart, in N kNStride.
constexpr uint32_t kKStride = 128, kNStride = 256;
__host__ __device__ int b_offset(int k, int n) {
  return (k / 16) * kKStride + (n / 8) * kNStride + (n % 8) * 16 + k % 16;
}

// One warpgroup: D = A · B with A [64][32] u8 row-major, B [32 k][32 n] s8; D [64][32]. swap: the
// descriptor's leading offset takes the N stride (and the stride offset the K stride).
__global__ void check_wgmma_kernel(const uint8_t* a, const int8_t* b, int* d, int swap) {
  __shared__ __align__(128) int8_t sb[kK * kN];
  for (int i = threadIdx.x; i < kK * kN; i += blockDim.x) {
    const int k = i / kN, n = i % kN;
    sb[b_offset(k, n)] = b[k * kN + n];
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const auto a_word = [&](int row, int k0) {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w |= static_cast<uint32_t>(a[row * kK + k0 + i]) << (8 * i);
    return w;
  };
  const int r0 = 16 * warp + g;
  const uint32_t frag[4] = {a_word(r0, 4 * t), a_word(r0 + 8, 4 * t), a_word(r0, 16 + 4 * t), a_word(r0 + 8, 16 + 4 * t)};
  int acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = 0;
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(sb));
  const uint64_t desc = swap ? smem_descriptor(address, kNStride, kKStride) : smem_descriptor(address, kKStride, kNStride);
  wgmma_fence();
  wgmma_u8s8_m64n32k32(acc, frag, desc, 0);
  wgmma_commit();
  wgmma_wait<0>();
  for (int j = 0; j < 4; ++j) {
    d[r0 * kN + 8 * j + 2 * t] = acc[4 * j + 0];
    d[r0 * kN + 8 * j + 2 * t + 1] = acc[4 * j + 1];
    d[(r0 + 8) * kN + 8 * j + 2 * t] = acc[4 * j + 2];
    d[(r0 + 8) * kN + 8 * j + 2 * t + 1] = acc[4 * j + 3];
  }
}

// Throughput: every warp issues `iters` x kChains independent products (registers only).
constexpr int kChains = 8;

__global__ void imma_rate_kernel(int iters, int* out) {
  const uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  const uint32_t b0 = threadIdx.x * 11u, b1 = threadIdx.x * 13u;
  int d[kChains][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) mma_16832_u8s8(d[c], a, b0, b1);
  }
  int s = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  if (s == 0x7FFFFFFF) out[0] = s;
}

__global__ void hmma_rate_kernel(int iters, int* out) {
  const uint32_t a[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
  const uint32_t b0 = 0x00010001u * (threadIdx.x & 1), b1 = 0;
  float d[kChains][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) mma_16816_f16(d[c], a, b0, b1);
  }
  float s = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  if (s == 12345.0f) out[0] = 1;
}

// Warpgroups of 4 warps: per iteration two products into each of kSets accumulator sets, then a
// commit; one wait at the end (the products of a set chain on its accumulators).
constexpr int kSets = 2;
__global__ void wgmma_rate_kernel(int iters, int* out) {
  __shared__ __align__(128) int8_t sb[kK * kN];
  for (int i = threadIdx.x; i < kK * kN; i += blockDim.x) sb[i] = static_cast<int8_t>(i);
  __syncthreads();
  const uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  const uint64_t desc = smem_descriptor(static_cast<uint32_t>(__cvta_generic_to_shared(sb)), kKStride, kNStride);
  int d[kSets][16] = {};
  wgmma_fence();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kSets; ++c) {
      wgmma_u8s8_m64n32k32(d[c], a, desc, 1);
      wgmma_u8s8_m64n32k32(d[c], a, desc, 1);
    }
    wgmma_commit();
  }
  wgmma_wait<0>();
  int s = 0;
#pragma unroll
  for (int c = 0; c < kSets; ++c)
    for (int i = 0; i < 16; ++i) s += d[c][i];
  if (s == 0x7FFFFFFF) out[0] = s;
}

template <typename Launch>
float time_ms(Launch&& launch) {
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start));
  PROBE_CHECK(cudaEventCreate(&stop));
  launch();
  PROBE_CHECK(cudaEventRecord(start));
  launch();
  PROBE_CHECK(cudaEventRecord(stop));
  PROBE_CHECK(cudaEventSynchronize(stop));
  PROBE_CHECK(cudaGetLastError());
  float ms = 0;
  PROBE_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

bool check_wgmma(int swap) {
  std::vector<uint8_t> a(kM * kK);
  std::vector<int8_t> b(kK * kN);
  uint32_t x = 12345;
  const auto next = [&]() { return x = x * 1664525u + 1013904223u, x >> 24; };
  for (auto& v : a) v = static_cast<uint8_t>(next());
  for (auto& v : b) v = static_cast<int8_t>(next());
  uint8_t* da;
  int8_t* db;
  int* dd;
  PROBE_CHECK(cudaMalloc(&da, a.size()));
  PROBE_CHECK(cudaMalloc(&db, b.size()));
  PROBE_CHECK(cudaMalloc(&dd, kM * kN * sizeof(int)));
  PROBE_CHECK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMemset(dd, 0, kM * kN * sizeof(int)));
  check_wgmma_kernel<<<1, 128>>>(da, db, dd, swap);
  PROBE_CHECK(cudaGetLastError());
  std::vector<int> d(kM * kN);
  PROBE_CHECK(cudaMemcpy(d.data(), dd, d.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      int want = 0;
      for (int k = 0; k < kK; ++k) want += static_cast<int>(a[m * kK + k]) * static_cast<int>(b[k * kN + n]);
      if (d[m * kN + n] != want && bad++ < 3) std::printf("  (%d, %d): got %d, want %d\n", m, n, d[m * kN + n], want);
    }
  }
  std::printf("wgmma m64n32k32 u8.s8, register A, descriptor %s: %s (%d of %d wrong)\n",
              swap ? "leading = N stride" : "leading = K stride", bad == 0 ? "MATCH" : "differs", bad, kM * kN);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  return bad == 0;
}

}  // namespace

int main() {
  int sms = 0, clock_khz = 0;
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  PROBE_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  cudaDeviceProp prop;
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, max clock %.0f MHz\n", prop.name, sms, clock_khz / 1e3);
  check_wgmma(0);
  check_wgmma(1);
  int* out;
  PROBE_CHECK(cudaMalloc(&out, sizeof(int)));
  const int iters = 20000;
  const double clocks_per_ms = clock_khz;  // at the max clock
  for (int warps : {4, 8, 16}) {
    const int threads = 32 * warps;
    const int blocks = sms * 2;
    const double imma_ms = time_ms([&]() { imma_rate_kernel<<<blocks, threads>>>(iters, out); });
    const double hmma_ms = time_ms([&]() { hmma_rate_kernel<<<blocks, threads>>>(iters, out); });
    const double wg_ms = time_ms([&]() { wgmma_rate_kernel<<<blocks, threads>>>(iters, out); });
    const double warps_total = static_cast<double>(blocks) * warps;
    const double imma_macs = warps_total * iters * kChains * 16.0 * 8 * 32;
    const double hmma_macs = warps_total * iters * kChains * 16.0 * 8 * 16;
    const double wg_macs = warps_total / 4 * iters * kSets * 2 * 64.0 * 32 * 32;
    const auto per_clock = [&](double macs, double ms) { return macs / ms / clocks_per_ms / sms; };
    std::printf(
        "%2d warps a block, 2 blocks an SM: mma.sync u8.s8 m16n8k32 %.0f MAC/clk/SM (%.1f us), mma.sync f16 "
        "m16n8k16 %.0f (%.1f us), wgmma u8.s8 m64n32k32 register A %.0f (%.1f us)\n",
        warps, per_clock(imma_macs, imma_ms), imma_ms * 1e3, per_clock(hmma_macs, hmma_ms), hmma_ms * 1e3,
        per_clock(wg_macs, wg_ms), wg_ms * 1e3);
  }
  return 0;
}
