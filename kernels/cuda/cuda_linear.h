// The CUDA backend's linear layers: operand checks, the EXL3 paths (few rows and grouped linears,
// exl3_gemv.cuh; the mma GEMM; decoding to fp16 and cuBLAS for long prefills) and dense linears
// through cuBLAS. Everything is queued on ctx.stream; nothing is allocated.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <span>

#include "kernels/backend.h"
#include "kernels/cuda/exl3_gemv.cuh"

namespace exl3 {

// From this many rows on, an EXL3 linear decodes its inner weight Wq to fp16, a chunk of input rows
// at a time, and multiplies through cuBLAS's tensor cores instead of decoding inside the GEMM:
// measured on an H200 at 2048 rows, the fused kernel ran at ~38 TFLOP/s while decoding costs ~1 ms
// per G weights, so for a prefill chunk decoding once and using cuBLAS wins by an order of magnitude.
constexpr int64_t kDequantGemmRows = 128;
// The fp16 staging of decoded Wq rows (whole rows of 16-row tiles, at most this many bytes).
constexpr uint64_t kDequantChunkBytes = uint64_t{64} << 20;

// What a linear uses of its backend: the stream, cuBLAS, and the scratch reserve_scratch made
// (F16 and F32 [scratch_rows, scratch_features]; dequant_staging kDequantChunkBytes).
struct CudaLinearContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  __half* scratch_a = nullptr;
  float* scratch_c = nullptr;
  int64_t scratch_rows = 0, scratch_features = 0;
  __half* dequant_staging = nullptr;
  Int8Activations int8_activations = Int8Activations::kOff;  // CudaBackendOptions::int8_activations
  // Where a linear_add hands the next RMSNorm off (cuda_linear_add_handoff): the linears' staged
  // inputs, handoff_words words. The CUDA backend points it at scratch_a: the output pass writes it
  // after its own matmul has read any input prestaged there (it waits for that matmul), and the
  // matmul that reads it stages nothing there.
  uint32_t* handoff = nullptr;
  int64_t handoff_words = 0;
};

// Backend::linear: y = x · w (+ bias), checked as the Backend contract says.
void cuda_linear(const CudaLinearContext& ctx, const LinearWeights& w, const Tensor& x, Tensor& y);

// One GEMV launch and one output launch for 1..3 EXL3 linears of x (Backend::linears,
// gate_up_silu, linear_add through `epilogue`) when they share their shape and format and the
// few-rows path has room (exl3_gemv.cuh); false, with nothing queued, otherwise.
// With `norm`, x (F16, shape only: not read) stands for rms_norm(norm.x, norm.weight, norm.eps),
// which the matmul computes as it stages its input (Backend::norm_linears, norm_gate_up_silu): only
// up to kGemvNormMaxRows rows of an F32 norm.x, false otherwise. kRopeKvWrite takes `rope`.
// With `staged` (a linear_add's hand-off, cuda_linear_add_handoff), each linear's input is
// already staged: up to kGemvHandoffMaxRows rows, x, norm.x and norm.weight only checked.
// `staged_x` (one linear, no norm; a gated product's hand-off, cuda_input_handoff): x is already
// staged there, x only checked. `next_input` (kSiluMul): the output pass also stages the input of
// the linear that reads the gated product (GemvInputHandoff).
struct FusedNorm {
  const Tensor& x;
  const Tensor& weight;
  float eps;
  const std::array<const void*, 3>* staged = nullptr;
};
bool cuda_fused_linears(const CudaLinearContext& ctx, std::span<const LinearWeights* const> ws, const Tensor& x,
                        std::span<Tensor> ys, GemvEpilogue epilogue, const FusedNorm* norm = nullptr,
                        const GemvRopeKv* rope = nullptr, const void* staged_x = nullptr,
                        const GemvInputHandoff* next_input = nullptr);

// The hand-off of a gated product of m rows and `width` columns to `consumer`, the linear that
// reads it: its int8 input, staged into ctx.handoff by the gated product's output pass, as `h`.
// False where the rows (kGemvInputHandoffMinRows .. kGemvInputHandoffMaxRows), int8 activations
// (off for this linear and m), the shapes, the scratch or the consumer's launch
// (exl3_gemv_linears_take_staged_input) do not allow it.
bool cuda_input_handoff(const CudaLinearContext& ctx, const LinearWeights& consumer, int64_t m, int64_t width,
                        GemvInputHandoff& h);

// Backend::linear_add (residual F32 += x · w) whose output pass also hands the residual's next
// RMSNorm (norm_weight F32, eps) off to `next`, 1..3 EXL3 linears of the normed residual that one
// grouped launch takes: their inputs are staged into ctx.handoff and their addresses set in
// `staged`. True when queued; false, with nothing queued, where the rows (kGemvHandoffMinRows ..
// kGemvHandoffMaxRows), the shapes, the scratch or the device do not allow it.
// `staged_x` (may be null): x already staged (cuda_input_handoff).
bool cuda_linear_add_handoff(const CudaLinearContext& ctx, const LinearWeights& w, const Tensor& x, Tensor& residual,
                             const Tensor& norm_weight, float eps, std::span<const LinearWeights* const> next,
                             std::array<const void*, 3>& staged, const void* staged_x);

}  // namespace exl3
