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
// How a few-rows linear of m rows takes its input staged (GemvProblem::prestaged's layouts): int8 q
// and its two side tables, or fp16 A in m_blocks 16-row blocks (doubled for 3INST and MCG with one
// m-block) and, for MUL1, the row sums. Per problem: staged_words words, then side_words floats
// (a multiple of 4, so that the next problem's words stay 16-byte aligned).
struct GemvStagedLayout {
  bool int8 = false;
  int m_blocks = 1;
  bool doubled = false;
  bool row_sums = false;
  int64_t staged_words = 0;
  int64_t side_words = 0;
  int64_t problem_words() const { return staged_words + side_words; }
};
GemvStagedLayout gemv_staged_layout(int64_t m, int64_t k, Codebook codebook, bool int8_activations);

// Rows for which a linear_add's output pass hands off the next RMSNorm (GemvNormHandoff): every
// row count of the few-rows path from 2. Measured on the H200, 8B decode, against no hand-off
// (bench/results/2026-12-06-s12-h200, run 3): int8 off, batch 2 +2.2%, 4 +5.5%, 8 +7.3%, 16 +6%,
// 32 +4%; with int8 auto, batch 4-8 +5-6%; at one row even (off), where the matmul's own fused
// norm (kGemvNormMaxRows) stays, and with int8 activations a loss (session 18, H100,
// bench/results/2026-12-05-s18/ runs 5-6, against the same tree without it: 8B batch 1 -4.1% over
// three rounds, 70B -4.8% with the input hand-off too). At two rows int8 takes it as fp16 does
// (until session 25 the int8 kernel's two-block stages, planned there, staged their own input;
// without them, 8B int8 auto batch 2 +1.3%, bench/results/2026-12-06-s25/ run 3).
constexpr int64_t kGemvHandoffMinRows = 2;
constexpr int64_t kGemvHandoffMaxRows = kGemvMaxRows;

// A linear_add's hand-off of the next RMSNorm (kAddResidual, one linear whose out_features is its
// n): with the residual's new values in hand, the output pass (exl3_gemv_output_norm.cu; a block
// cluster per row sums its squares) forms h = fp16(rms_norm(residual, norm_weight, eps)), as
// the fused RMSNorm of the matmul does, and stages the input of each of `consumers` linears of h
// (suh[i], all taking `layout`) into staged[i] (its side tables after the staged words). Those
// linears then launch with it as their staged_input.
struct GemvNormHandoff {
  const float* norm_weight = nullptr;  // F32 [n]
  float eps = 0.0f;
  GemvStagedLayout layout;
  int consumers = 0;
  const __half* suh[3] = {};
  uint32_t* staged[3] = {};
};

// Whether this device and the output pass can take a hand-off for m rows of n outputs read by
// `consumers` linears (sm_90 clusters; n / 128 cut into at most 8 blocks of outputs whose warps
// outnumber the consumers).
bool gemv_norm_handoff_fits(int64_t m, int64_t n, int consumers);

// Rows for which a gated product's output pass hands off the int8 input of the linear that reads it
// (GemvInputHandoff): 2 up to those the int8 matmul would otherwise quantize in every block of a
// slice (below kInt8PrestageMinRows, exl3_gemv_layout.cuh). Measured on the H100, 8B decode with
// int8 auto against the same tree without it (bench/results/2026-12-05-s17/, runs 1-3): batch 2
// +4.0%, +3.9%, +3.2%; batch 3 +5.4%; batch 4 +3.6%, +1.1%; 70B batch 4 +1.1%. Not kept: batch 1
// (made to take it, session 18 runs 5-6: 8B +0.6% over four rounds within a 6% spread, 70B even),
// and where a staging launch prestages the input (int8 batch 8 -1.1%, fp16 batch 8 -1.5%, 64
// +1.2%) or fp16 blocks stage it (batch 1-4 within +-0.8%): the transform moves into the output
// pass, onto the critical path, from work the dependent launches overlap.
constexpr int64_t kGemvInputHandoffMinRows = 2;
constexpr int64_t kGemvInputHandoffMaxRows = 4;

// A gated product's hand-off of the next linear's input (kSiluMul, int8 activations): with
// fp16(silu(g) · u) in hand, the output pass also does the input transform of the linear that reads
// it (⊙ suh, 128-point Hadamard, int8 per 128 inputs) into the staged layout its int8 GEMV takes
// (`layout`; `staged` holds the staged words, then the side tables), as launch_gemv_stage_int8
// would; that linear then launches with it as its staged_input. The gated product's n must be the
// consumer's k and in_features.
struct GemvInputHandoff {
  GemvStagedLayout layout;
  const __half* suh = nullptr;
  uint32_t* staged = nullptr;
};

void launch_exl3_gemv_linears(std::span<const Exl3LinearParams> ps, float* scratch, int64_t scratch_floats,
                              GemvEpilogue epilogue, int sm_count, cudaStream_t stream,
                              const GemvRopeKv* rope = nullptr, const GemvNormHandoff* handoff = nullptr,
                              const GemvInputHandoff* input_handoff = nullptr);
bool exl3_gemv_linears_fit(std::span<const Exl3LinearParams> ps, int64_t scratch_floats);
// Whether they fit and their launch would take a staged input (staged_input): the few-rows path's
// rows (kGemvHandoffMaxRows).
bool exl3_gemv_linears_take_staged_input(std::span<const Exl3LinearParams> ps, int64_t scratch_floats);

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
  bool norm_handoff = false;  // kAddResidual: `handoff` is taken (launch_gemv_output_norm)
  GemvNormHandoff handoff;
  bool input_handoff = false;  // kSiluMul: `next_input` is staged too
  GemvInputHandoff next_input;
};

void launch_gemv_output(const GemvOutputArgs& args, cudaStream_t stream);
void launch_gemv_output_norm(const GemvOutputArgs& args, cudaStream_t stream);

}  // namespace exl3
