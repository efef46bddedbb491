// Launchers of the small CUDA ops of one forward pass (one .cu per op, same stems as kernels/ref/
// and kernels/cpu/): rms_norm, add, silu_mul, embedding, rope, gather_rows, convert. Each is the
// device twin of the CPU reference named in its comment. All asynchronous on `stream`; each
// checks its contract at entry (EXL3_CHECK) and its launch (EXL3_CUDA_CHECK_LAUNCH). Element
// counts of 0 launch nothing.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace exl3 {

// rms_norm_ref: out[r, :] = x[r, :] · rsqrt(mean(x[r, :]²) + eps) · weight, sums in fp32.
// x and out F32 or F16 (independently); out may alias x (same dtype then). weight F32 [dim].
struct RmsNormParams {
  const void* x = nullptr;
  DType x_dtype = DType::kF32;
  const float* weight = nullptr;
  void* out = nullptr;
  DType out_dtype = DType::kF16;
  int64_t rows = 0, dim = 0;
  float eps = 1e-5f;
};
void launch_rms_norm(const RmsNormParams& p, cudaStream_t stream);

// add_inplace_ref: x[i] += y[i]; x F32, y F32 or F16.
struct AddParams {
  float* x = nullptr;
  const void* y = nullptr;
  DType y_dtype = DType::kF32;
  int64_t n = 0;
};
void launch_add(const AddParams& p, cudaStream_t stream);

// silu_mul_ref: out[i] = silu(gate[i]) · up[i], computed in fp32, rounded to fp16.
struct SiluMulParams {
  const __half* gate = nullptr;
  const __half* up = nullptr;
  __half* out = nullptr;
  int64_t n = 0;
};
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream);

// embedding_ref: out[t, :] = float(table[ids[t], :]); table F32/F16/BF16 [vocab, dim], out F32
// [n, dim]. ids are in range (the caller validates them).
struct EmbeddingParams {
  const void* table = nullptr;
  DType table_dtype = DType::kF16;
  const int32_t* ids = nullptr;
  float* out = nullptr;
  int64_t n = 0, dim = 0, vocab = 0;
};
void launch_embedding(const EmbeddingParams& p, cudaStream_t stream);

// rope_ref: NEOX rotary embedding in place on x F16 [tokens, heads, head_dim]: for i <
// rotary_dim/2, angle = positions[t] · inv_freq[i] (fp32 product, as transformers forms it),
// (x[i], x[i + rotary_dim/2]) rotated by (cos, sin) · attention_scaling, in fp32, rounded to fp16.
// rotary_dim even, <= head_dim.
struct RopeParams {
  __half* x = nullptr;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;   // [rotary_dim / 2]
  int64_t tokens = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  float attention_scaling = 1.0f;
};
void launch_rope(const RopeParams& p, cudaStream_t stream);

// out[i, :] = x[rows[i], :] for any dtype: row_bytes bytes per row (multiple of 4).
struct GatherRowsParams {
  const void* x = nullptr;
  void* out = nullptr;
  const int32_t* rows = nullptr;
  int64_t num_rows = 0, row_bytes = 0, src_rows = 0;
};
void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream);

// out[i] = in[i] converted (F32, F16, BF16 in either direction; round to nearest even).
struct ConvertParams {
  const void* in = nullptr;
  DType in_dtype = DType::kF32;
  void* out = nullptr;
  DType out_dtype = DType::kF16;
  int64_t n = 0;
};
void launch_convert(const ConvertParams& p, cudaStream_t stream);

}  // namespace exl3
