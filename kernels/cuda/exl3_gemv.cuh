// Internal to the EXL3 linear (exl3_gemm.cu, exl3_linear.cu): the decode-bound path for few rows,
// m = 1..kGemvMaxRows (exl3_gemv.cu says how it spends its instructions).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "kernels/cuda/exl3_linear.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {

constexpr int64_t kGemvMaxRows = 64;
// Rows up to which the matmul can take its input's RMSNorm itself (Exl3LinearParams::norm_x): every
// block sums each row's squares over the whole input, which past a row or two costs more L2 reads
// than the RMSNorm launch it saves.
constexpr int64_t kGemvNormMaxRows = 2;

// C = A · Wq for 1 <= m <= kGemvMaxRows (A already transformed). Contract as launch_exl3_gemm
// plus m in 1..kGemvMaxRows (EXL3_CHECK); sm_count is the device's SM count (it sizes the
// split-K). Split-K slices add into C with fp32 atomics after a cudaMemsetAsync of C, so sums may
// differ from run to run in the last bits.
// Asynchronous on `stream`.
void launch_exl3_gemv(const Exl3GemmParams& p, int sm_count, cudaStream_t stream);

// The whole linear for 1 <= m <= kGemvMaxRows in two or three launches: the input transform, from
// kGemvPrestageMinRows (fp16) or kInt8PrestageMinRows (int8) rows on once into scratch_a where
// p.scratch_a_halves holds it (exl3_gemv_stage.cu, exl3_gemv_stage_int8.cu), else by every GEMV
// block for its own k-slice of x; the GEMV, which writes one partial product per
// k-slice into scratch_c viewed as F32 [slices, m, n] (no memset, no atomics, the same result on
// every run); the output transform, which sums the slices. Contract as launch_exl3_linear plus
// m in 1..kGemvMaxRows and p.scratch_c_floats >= m·n. Asynchronous on `stream`.
void launch_exl3_gemv_linear(const Exl3LinearParams& p, int sm_count, cudaStream_t stream);

// Whether scratch_c (p.scratch_c_floats, 0 = m·n) has room for the fewest k-slices
// launch_exl3_gemv_linear may use for this shape (m in 1..kGemvMaxRows).
bool exl3_gemv_linear_fits(const Exl3LinearParams& p);

// What the output transform does with each value v = had128(Σ slices)[j] / sqrt(128) · svh[j]
// (+ bias[j]) of a grouped linear (exl3_gemv_output.cu):
//   kStore:       y[row, j] = v, rounded once to y's dtype (F16 or F32), as launch_exl3_linear;
//   kAddResidual: y F32 (a residual stream) += v in fp32, as a linear into F32 and then add();
//   kSiluMul:     two linears (gate, up) of equal width; the first's y (F16) receives
//                 fp16(silu(g) · u) of the fp16-rounded g and u, as two linears and then silu_mul();
//   kRopeKvWrite: three linears q, k, v whose rows are the step's tokens and whose 128-column
//                 blocks are heads (F16 y, out_features = n): each value rounded to fp16 as kStore,
//                 then q and k rotated (pairs (d, d + 64) of a head, rope_rotation.cuh) in y, and
//                 the rotated k and v written into their paged-cache slots too (GemvRopeKv): as the
//                 three linears and then launch_rope_kv_write, bit for bit.
enum class GemvEpilogue { kStore, kAddResidual, kSiluMul, kRopeKvWrite };

// The rotation and the cache of kRopeKvWrite: heads of kGemvRopeHeadDim, rotated whole.
constexpr int64_t kGemvRopeHeadDim = 128;
struct GemvRopeKv {
  PagedBatch batch;                 // the step's tokens (m of them), positions and page tables
  const float* inv_freq = nullptr;  // [kGemvRopeHeadDim / 2]
  float attention_scaling = 1.0f;
  __half* k_pages = nullptr;  // [num_pages, page_size, kv_heads, kGemvRopeHeadDim]
  __half* v_pages = nullptr;
  int64_t num_pages = 0;
};

// Up to 3 linears of the same x (same m, k, in_features, bits, codebook; each its own trellis,
// suh, svh, bias, n, out_features, y) in one GEMV launch and one output launch, with their partial
// products in `scratch` (scratch_floats floats, shared by all; the params' scratch fields are not
// used). Use exl3_gemv_linears_fit first; the launcher checks it again (EXL3_CHECK). kRopeKvWrite
// takes `rope` (read at launch).
void launch_exl3_gemv_linears(std::span<const Exl3LinearParams> ps, float* scratch, int64_t scratch_floats,
                              GemvEpilogue epilogue, int sm_count, cudaStream_t stream,
                              const GemvRopeKv* rope = nullptr);
bool exl3_gemv_linears_fit(std::span<const Exl3LinearParams> ps, int64_t scratch_floats);

// ---- internal to exl3_gemv.cu / exl3_gemv_output.cu ----------------------------------------------

struct GemvOutput {
  const float* c;       // partials [slices, m, n]
  const __half* svh;    // [n]
  const float* bias;    // [out_features] or null
  void* y;              // [m, out_features]
  bool y_f32;
  int64_t n;
  int64_t out_features;
};

struct GemvOutputArgs {
  int64_t m = 0;
  int64_t slices = 0;
  int outputs = 0;
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  GemvOutput output[3];
  GemvRopeKv rope;  // kRopeKvWrite
};

void launch_gemv_output(const GemvOutputArgs& args, cudaStream_t stream);

}  // namespace exl3
