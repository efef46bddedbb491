// The CUDA backend's linear layers (cuda_linear.h).
#include "kernels/cuda/cuda_linear.h"

#include <algorithm>
#include <array>
#include <optional>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_checks.h"
#include "kernels/cuda/dense_linear.h"
#include "kernels/cuda/exl3_decode.cuh"
#include "kernels/cuda/exl3_decode_gemm.h"
#include "kernels/cuda/exl3_linear.cuh"

namespace exl3 {
namespace {

// The launch-shape half of an EXL3 linear's parameters (no x, no y, no bias, no scratch) for m rows:
// all that exl3_gemv_linears_fit and gemv_staged_layout read, so also for an input not formed yet.
Exl3LinearParams shape_params(const CudaLinearContext& ctx, const LinearWeights& w, int64_t m) {
  const Exl3Weight& e = w.exl3;
  Exl3LinearParams p;
  p.m = m;
  p.in_features = w.in_features;
  p.out_features = w.out_features;
  p.trellis = ptr<int16_t>(e.trellis);
  p.suh = ptr<__half>(e.suh);
  p.svh = ptr<__half>(e.svh);
  p.k = e.k;
  p.n = e.n;
  p.bits = e.bits;
  p.codebook = e.codebook;
  p.int8_activations = use_int8_activations(ctx.int8_activations, e.bits, e.codebook, m);
  return p;
}

// Checks a linear's operands (aborting on a broken contract) and returns the EXL3 kernel's
// parameters for it (meaningful when w.is_exl3 and x has rows).
Exl3LinearParams checked_linear(const CudaLinearContext& ctx, const LinearWeights& w, const Tensor& x, Tensor& y) {
  check_dtype(x, DType::kF16, "linear x");
  check_f32_or_f16(y, "linear y");
  EXL3_CHECK(x.rank() == 2 && x.dim(1) == w.in_features, "linear x ", shape_string(x.shape()), " for ", w.in_features,
             " inputs");
  const int64_t m = x.dim(0);
  EXL3_CHECK(y.rank() == 2 && y.dim(0) == m && y.dim(1) == w.out_features, "linear y ", shape_string(y.shape()),
             " for ", m, " rows of ", w.out_features, " outputs");
  if (w.bias.defined()) {
    check_dtype(w.bias, DType::kF32, "linear bias");
    EXL3_CHECK(w.bias.numel() == w.out_features, "linear bias ", shape_string(w.bias.shape()));
  }
  if (!w.is_exl3 || m == 0) return Exl3LinearParams{};
  const Exl3Weight& e = w.exl3;
  check_dtype(e.trellis, DType::kI16, "linear trellis");
  check_dtype(e.suh, DType::kF16, "linear suh");
  check_dtype(e.svh, DType::kF16, "linear svh");
  EXL3_CHECK(m <= ctx.scratch_rows && e.k <= ctx.scratch_features && e.n <= ctx.scratch_features, "linear: ", m,
             " rows through a ", e.k, "x", e.n, " EXL3 linear but reserve_scratch reserved ", ctx.scratch_rows,
             " rows of ", ctx.scratch_features, " features");
  Exl3LinearParams p = shape_params(ctx, w, m);
  p.x = ptr<__half>(x);
  p.bias = w.bias.defined() ? ptr<float>(w.bias) : nullptr;
  p.y = y.mutable_raw();
  p.y_f32 = y.dtype() == DType::kF32;
  p.scratch_a = ctx.scratch_a;
  p.scratch_c = ctx.scratch_c;
  p.scratch_c_floats = ctx.scratch_rows * ctx.scratch_features;
  p.scratch_a_halves = ctx.scratch_rows * ctx.scratch_features;
  return p;
}

// A long prefill through cuBLAS. From kDecodeGemmMinRows rows on: W decoded into the original basis
// and multiplied with x as is (exl3_decode_gemm.h). Below: scratch_c = scratch_a · Wq with Wq decoded
// into the fp16 staging rows chunk by chunk, each chunk multiplied through cuBLAS and accumulated
// into scratch_c, between the input and output transforms.
void exl3_linear_through_cublas(const CudaLinearContext& ctx, const Exl3LinearParams& p) {
  if (p.m >= kDecodeGemmMinRows) {
    launch_exl3_decode_gemm(p, {ctx.cublas, ctx.dequant_staging, kDequantChunkBytes}, ctx.stream);
    return;
  }
  launch_exl3_input_transform(p, ctx.stream);
  const int64_t chunk_rows = std::max<int64_t>(
      16, static_cast<int64_t>(kDequantChunkBytes / (static_cast<uint64_t>(p.n) * sizeof(__half))) / 16 * 16);
  const int64_t words_per_tile_row = (p.n / 16) * 16 * p.bits;  // int16 per 16 input rows
  auto* staging = ctx.dequant_staging;
  for (int64_t k0 = 0; k0 < p.k; k0 += chunk_rows) {
    const int64_t rows = std::min(chunk_rows, p.k - k0);
    Exl3DecodeParams d;
    d.trellis = p.trellis + (k0 / 16) * words_per_tile_row;
    d.out = staging;
    d.k = rows;
    d.n = p.n;
    d.bits = p.bits;
    d.codebook = p.codebook;
    launch_exl3_decode(d, ctx.stream);
    const float alpha = 1.0f, beta = k0 == 0 ? 0.0f : 1.0f;
    EXL3_CUBLAS_CHECK(cublasGemmEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(p.n), static_cast<int>(p.m),
                                   static_cast<int>(rows), &alpha, staging, CUDA_R_16F, static_cast<int>(p.n),
                                   p.scratch_a + k0, CUDA_R_16F, static_cast<int>(p.k), &beta, p.scratch_c,
                                   CUDA_R_32F, static_cast<int>(p.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  launch_exl3_output_transform(p, ctx.stream);
}

}  // namespace

void cuda_linear(const CudaLinearContext& ctx, const LinearWeights& w, const Tensor& x, Tensor& y) {
  const Exl3LinearParams e = checked_linear(ctx, w, x, y);
  const int64_t m = x.dim(0);
  if (m == 0) return;  // an empty batch has no buffers to point at
  if (w.is_exl3) {
    if (m >= kDequantGemmRows) {
      exl3_linear_through_cublas(ctx, e);
    } else {
      launch_exl3_linear(e, ctx.stream);
    }
    return;
  }
  const float* bias = w.bias.defined() ? ptr<float>(w.bias) : nullptr;
  const bool y_f32 = y.dtype() == DType::kF32;
  check_dtype(w.dense, DType::kF16, "linear dense weight");
  EXL3_CHECK(w.dense.shape() == Shape({w.out_features, w.in_features}), "linear dense weight ",
             shape_string(w.dense.shape()));
  DenseLinearParams p;
  p.x = ptr<__half>(x);
  p.w = ptr<__half>(w.dense);
  p.bias = bias;
  p.y = y.mutable_raw();
  p.y_f32 = y_f32;
  p.m = m;
  p.in_features = w.in_features;
  p.out_features = w.out_features;
  if (bias != nullptr && !y_f32) {
    EXL3_CHECK(m <= ctx.scratch_rows && w.out_features <= ctx.scratch_features, "linear: an F16 output with a bias of ", m,
               " rows of ", w.out_features, " needs the F32 scratch, reserved for ", ctx.scratch_rows, " rows of ",
               ctx.scratch_features);
    p.scratch_c = ctx.scratch_c;
  }
  launch_dense_linear(p, ctx.cublas, ctx.stream);
}

bool cuda_fused_linears(const CudaLinearContext& ctx, std::span<const LinearWeights* const> ws, const Tensor& x,
                        std::span<Tensor> ys, GemvEpilogue epilogue, const FusedNorm* norm, const GemvRopeKv* rope,
                        const void* staged_x, const GemvInputHandoff* next_input) {
  const int64_t m = x.rank() == 2 ? x.dim(0) : 0;
  if (m < 1 || m > kGemvMaxRows || ws.size() != ys.size() || ws.empty() || ws.size() > 3) return false;
  EXL3_CHECK(staged_x == nullptr || (ws.size() == 1 && norm == nullptr), "a staged x takes one linear and no norm");
  if (norm != nullptr) {
    const int64_t dim = x.dim(1);
    if (m > (norm->staged != nullptr ? kGemvHandoffMaxRows : kGemvNormMaxRows) || norm->x.dtype() != DType::kF32 ||
        norm->x.shape() != Shape({m, dim}) || norm->weight.dtype() != DType::kF32 || norm->weight.numel() != dim) {
      return false;
    }
  }
  std::array<Exl3LinearParams, 3> params;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!ws[i]->is_exl3) return false;
    params[i] = checked_linear(ctx, *ws[i], x, ys[i]);
    if (staged_x != nullptr) {
      params[i].staged_input = static_cast<const uint32_t*>(staged_x);
    } else if (norm != nullptr && norm->staged != nullptr) {
      params[i].staged_input = static_cast<const uint32_t*>((*norm->staged)[i]);
    } else if (norm != nullptr) {
      params[i].norm_x = ptr<float>(norm->x);
      params[i].norm_weight = ptr<float>(norm->weight);
      params[i].norm_eps = norm->eps;
    }
  }
  const std::span<const Exl3LinearParams> ps(params.data(), ws.size());
  const int64_t floats = ctx.scratch_rows * ctx.scratch_features;
  if (!exl3_gemv_linears_fit(ps, floats)) return false;
  launch_exl3_gemv_linears(ps, ctx.scratch_c, floats, epilogue, device_sm_count(), ctx.stream, rope, nullptr,
                           next_input);
  return true;
}

namespace {

// The layout in which the linears `consumers` (1..3, one grouped launch) of m rows take an input of
// `dim` features handed off into ctx.handoff (each consumer's words one after the other), with
// their shape parameters in `params`; none where one is not an EXL3 linear of exactly dim inputs,
// their launch stages its own input (exl3_gemv_linears_take_staged_input) or ctx.handoff cannot
// hold them all.
std::optional<GemvStagedLayout> handoff_layout(const CudaLinearContext& ctx,
                                               std::span<const LinearWeights* const> consumers, int64_t m, int64_t dim,
                                               std::array<Exl3LinearParams, 3>& params) {
  if (ctx.handoff == nullptr || consumers.empty() || consumers.size() > params.size()) return std::nullopt;
  for (size_t i = 0; i < consumers.size(); ++i) {
    const LinearWeights& c = *consumers[i];
    if (!c.is_exl3 || c.in_features != dim || c.exl3.k != dim) return std::nullopt;
    params[i] = shape_params(ctx, c, m);
  }
  const std::span<const Exl3LinearParams> cs(params.data(), consumers.size());
  if (!exl3_gemv_linears_take_staged_input(cs, ctx.scratch_rows * ctx.scratch_features)) {
    return std::nullopt;
  }
  const GemvStagedLayout layout = gemv_staged_layout(m, dim, params[0].codebook, params[0].int8_activations);
  if (static_cast<int64_t>(consumers.size()) * layout.problem_words() > ctx.handoff_words) return std::nullopt;
  return layout;
}

}  // namespace

bool cuda_input_handoff(const CudaLinearContext& ctx, const LinearWeights& consumer, int64_t m, int64_t width,
                        GemvInputHandoff& h) {
  if (m < kGemvInputHandoffMinRows || m > kGemvInputHandoffMaxRows) return false;
  const LinearWeights* consumers[] = {&consumer};
  std::array<Exl3LinearParams, 3> params;
  const std::optional<GemvStagedLayout> layout = handoff_layout(ctx, consumers, m, width, params);
  if (!layout.has_value() || !layout->int8) return false;
  h.layout = *layout;
  h.suh = params[0].suh;
  h.staged = ctx.handoff;
  return true;
}

bool cuda_linear_add_handoff(const CudaLinearContext& ctx, const LinearWeights& w, const Tensor& x, Tensor& residual,
                             const Tensor& norm_weight, float eps, std::span<const LinearWeights* const> next,
                             std::array<const void*, 3>& staged, const void* staged_x) {
  const int64_t m = x.rank() == 2 ? x.dim(0) : 0;
  if (m < kGemvHandoffMinRows || m > kGemvHandoffMaxRows || !w.is_exl3) return false;
  const int64_t dim = residual.rank() == 2 ? residual.dim(1) : 0;
  if (residual.dtype() != DType::kF32 || residual.rank() != 2 || residual.dim(0) != m || w.exl3.n != dim ||
      norm_weight.dtype() != DType::kF32 || norm_weight.numel() != dim) {
    return false;
  }
  std::array<Exl3LinearParams, 3> consumers;
  const std::optional<GemvStagedLayout> handed = handoff_layout(ctx, next, m, dim, consumers);
  const int count = static_cast<int>(next.size());
  if (!handed.has_value() || !gemv_norm_handoff_fits(m, dim, count)) return false;
  const GemvStagedLayout layout = *handed;
  const int64_t floats = ctx.scratch_rows * ctx.scratch_features;
  Exl3LinearParams p = checked_linear(ctx, w, x, residual);
  p.staged_input = static_cast<const uint32_t*>(staged_x);
  const std::span<const Exl3LinearParams> ps(&p, 1);
  if (!exl3_gemv_linears_fit(ps, floats)) return false;
  GemvNormHandoff h;
  h.norm_weight = ptr<float>(norm_weight);
  h.eps = eps;
  h.layout = layout;
  h.consumers = count;
  for (int i = 0; i < count; ++i) {
    h.suh[i] = consumers[static_cast<size_t>(i)].suh;
    h.staged[i] = ctx.handoff + i * layout.problem_words();
    staged[static_cast<size_t>(i)] = h.staged[i];
  }
  launch_exl3_gemv_linears(ps, ctx.scratch_c, floats, GemvEpilogue::kAddResidual, device_sm_count(), ctx.stream,
                           nullptr, &h);
  return true;
}

}  // namespace exl3
