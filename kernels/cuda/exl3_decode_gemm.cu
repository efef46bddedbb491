// The long-prefill EXL3 linear (exl3_decode_gemm.h): per slab of output columns, the original-basis
// decode into the staging and one cublasGemmEx on the raw input; then, with a bias, one epilogue.
#include "kernels/cuda/exl3_decode_gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dense_linear.h"
#include "kernels/cuda/exl3_decode_original.cuh"

namespace exl3 {
namespace {

constexpr int64_t kBlock = 128;
int64_t round_up_to_block(int64_t v) { return (v + kBlock - 1) / kBlock * kBlock; }

}  // namespace

void launch_exl3_decode_gemm(const Exl3LinearParams& p, const DecodeGemmStaging& s, cudaStream_t stream) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  EXL3_CHECK(p.m >= 1 && p.m <= kIntMax, "decode_gemm: m=", p.m, " must be in 1..INT32_MAX");
  EXL3_CHECK(p.k > 0 && p.k % kBlock == 0 && p.n > 0 && p.n % kBlock == 0 && p.k <= kIntMax && p.n <= kIntMax,
             "decode_gemm: k=", p.k, " n=", p.n, " must be positive multiples of 128");
  EXL3_CHECK(p.in_features >= 1 && p.in_features <= p.k && p.out_features >= 1 && p.out_features <= p.n,
             "decode_gemm: in_features ", p.in_features, " of k=", p.k, ", out_features ", p.out_features,
             " of n=", p.n);
  EXL3_CHECK(p.x != nullptr && p.trellis != nullptr && p.suh != nullptr && p.svh != nullptr && p.y != nullptr,
             "decode_gemm: null pointer");
  const bool via_scratch = p.bias != nullptr && !p.y_f32;
  if (via_scratch) {
    const int64_t floats = p.scratch_c_floats > 0 ? p.scratch_c_floats : p.m * p.n;
    EXL3_CHECK(p.scratch_c != nullptr && floats >= p.m * p.out_features,
               "decode_gemm: an F16 output with a bias needs ", p.m * p.out_features, " floats of scratch_c, got ",
               p.scratch_c == nullptr ? 0 : floats);
  }
  EXL3_CHECK(s.cublas != nullptr && s.staging != nullptr, "decode_gemm: null cuBLAS handle or staging");
  cudaStream_t bound = nullptr;
  EXL3_CUBLAS_CHECK(cublasGetStream(s.cublas, &bound));
  EXL3_CHECK(bound == stream, "decode_gemm: the cuBLAS handle is bound to another stream");

  // Slabs of whole 128-column blocks over the input rows the GEMM reads, as many as the staging
  // needs, of (nearly) equal widths so that no GEMM is a thin remainder.
  const int64_t rows = round_up_to_block(p.in_features);
  const int64_t max_slab_cols =
      static_cast<int64_t>(s.staging_bytes / (static_cast<uint64_t>(rows) * sizeof(__half))) / kBlock * kBlock;
  EXL3_CHECK(max_slab_cols >= kBlock, "decode_gemm: a staging of ", s.staging_bytes, " bytes holds no ", rows,
             "x128 slab");
  const int64_t cols_used = round_up_to_block(p.out_features);
  const int64_t slabs = (cols_used + max_slab_cols - 1) / max_slab_cols;
  const int64_t slab_cols = round_up_to_block((cols_used + slabs - 1) / slabs);  // <= max_slab_cols

  // Row-major C [m, out_features] is column-major [out_features, m]; the staged row-major slab
  // [rows, cols] is column-major [cols, rows], of which the GEMM reads the first out_cols x in_features;
  // row-major x [m, in_features] is column-major [in_features, m].
  void* c = via_scratch ? static_cast<void*>(p.scratch_c) : p.y;
  const bool c_f32 = p.y_f32 || via_scratch;
  const cudaDataType c_type = c_f32 ? CUDA_R_32F : CUDA_R_16F;
  const size_t c_bytes = c_f32 ? sizeof(float) : sizeof(__half);
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t col0 = 0; col0 < cols_used; col0 += slab_cols) {
    const int64_t cols = std::min(slab_cols, cols_used - col0);
    Exl3DecodeOriginalParams d;
    d.trellis = p.trellis;
    d.suh = p.suh;
    d.svh = p.svh;
    d.out = s.staging;
    d.k = p.k;
    d.n = p.n;
    d.row0 = 0;
    d.rows = rows;
    d.col0 = col0;
    d.cols = cols;
    d.ld = cols;
    d.bits = p.bits;
    d.codebook = p.codebook;
    launch_exl3_decode_original(d, stream);
    const int64_t out_cols = std::min(cols, p.out_features - col0);
    EXL3_CUBLAS_CHECK(cublasGemmEx(s.cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(out_cols),
                                   static_cast<int>(p.m), static_cast<int>(p.in_features), &alpha, s.staging,
                                   CUDA_R_16F, static_cast<int>(cols), p.x, CUDA_R_16F, static_cast<int>(p.in_features),
                                   &beta, static_cast<char*>(c) + static_cast<size_t>(col0) * c_bytes, c_type,
                                   static_cast<int>(p.out_features), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (p.bias == nullptr) return;
  launch_bias_epilogue(p.y_f32 ? static_cast<const float*>(p.y) : p.scratch_c, p.bias, p.y, p.y_f32, p.m,
                       p.out_features, stream);
}

}  // namespace exl3
