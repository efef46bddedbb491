// Element types of the small CUDA ops (kernels/cuda/*.cu): device conversions to and from fp32
// (round to nearest even), and a host dispatch from a runtime DType to the matching C++ type, so
// each op writes its kernel once as a template.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/check.h"
#include "kernels/tensor.h"

namespace exl3::cuda_io {

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the device type of `dtype` (F32 float, F16 __half, BF16
// __nv_bfloat16); any other dtype aborts naming `what`.
template <typename F>
void visit_float_dtype(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kF32:
      f(TypeTag<float>{});
      return;
    case DType::kF16:
      f(TypeTag<__half>{});
      return;
    case DType::kBF16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    default:
      EXL3_CHECK(false, what, ": dtype ", dtype_name(dtype), " is not F32, F16 or BF16");
  }
}

// Blocks of a grid-stride elementwise launch over n elements with `threads` per block: enough to
// fill any current GPU (132 SMs x 16 blocks of 256), capped so the grid stays small.
inline unsigned elementwise_blocks(int64_t n, int threads) {
  constexpr int64_t kMaxBlocks = 4096;
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

}  // namespace exl3::cuda_io
