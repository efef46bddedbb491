// Dense linear through cublasGemmEx plus a bias epilogue kernel (see dense_linear.h).
#include <algorithm>
#include <limits>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dense_linear.h"

namespace exl3 {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond

// y[r, j] = c[r, j] + bias[j], rounded once to the output dtype. c may alias y (F32 output).
template <typename Out>
__global__ void bias_epilogue_kernel(const float* c, const float* __restrict__ bias, Out* y, int64_t rows,
                                     int64_t cols) {
  const int64_t total = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const float v = c[i] + bias[i % cols];
    if constexpr (sizeof(Out) == 4) {
      y[i] = v;
    } else {
      y[i] = __float2half_rn(v);
    }
  }
}

}  // namespace

void launch_dense_linear(const DenseLinearParams& p, cublasHandle_t handle, cudaStream_t stream) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  EXL3_CHECK(p.m >= 0 && p.in_features > 0 && p.out_features > 0, "dense_linear: m=", p.m,
             " in_features=", p.in_features, " out_features=", p.out_features);
  EXL3_CHECK(p.m <= kIntMax && p.in_features <= kIntMax && p.out_features <= kIntMax, "dense_linear: m=", p.m,
             " in=", p.in_features, " out=", p.out_features, " exceed cuBLAS's int sizes");
  if (p.m == 0) return;
  EXL3_CHECK(p.x != nullptr && p.w != nullptr && p.y != nullptr, "dense_linear: null pointer");
  const bool via_scratch = p.bias != nullptr && !p.y_f32;
  EXL3_CHECK(!via_scratch || p.scratch_c != nullptr, "dense_linear: an F16 output with a bias needs scratch_c");
  EXL3_CHECK(handle != nullptr, "dense_linear: null cuBLAS handle");
  cudaStream_t bound = nullptr;
  EXL3_CUBLAS_CHECK(cublasGetStream(handle, &bound));
  EXL3_CHECK(bound == stream, "dense_linear: the cuBLAS handle is bound to another stream");

  // Row-major Y [m, out] is column-major Yc [out, m]; row-major W [out, in] is column-major
  // [in, out], so Yc = Wcᵀ · Xc with Xc the column-major [in, m] view of row-major X.
  const int m = static_cast<int>(p.out_features);
  const int n = static_cast<int>(p.m);
  const int k = static_cast<int>(p.in_features);
  const float alpha = 1.0f, beta = 0.0f;
  void* c = via_scratch ? static_cast<void*>(p.scratch_c) : p.y;
  const cudaDataType c_type = (p.y_f32 || via_scratch) ? CUDA_R_32F : CUDA_R_16F;
  EXL3_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, p.w, CUDA_R_16F, k, p.x, CUDA_R_16F,
                                 k, &beta, c, c_type, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (p.bias == nullptr) return;
  launch_bias_epilogue(p.y_f32 ? static_cast<const float*>(p.y) : p.scratch_c, p.bias, p.y, p.y_f32, p.m,
                       p.out_features, stream);
}

void launch_bias_epilogue(const float* c, const float* bias, void* y, bool y_f32, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks));
  if (y_f32) {
    bias_epilogue_kernel<float><<<blocks, kThreads, 0, stream>>>(c, bias, static_cast<float*>(y), rows, cols);
  } else {
    bias_epilogue_kernel<__half><<<blocks, kThreads, 0, stream>>>(c, bias, static_cast<__half*>(y), rows, cols);
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
