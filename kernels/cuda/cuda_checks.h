// Operand checks and raw pointers of the CUDA backend's tensors (a broken contract is a caller bug:
// EXL3_CHECK aborts naming the operand), and the step metadata as the kernels take it.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/paged_attention.cuh"

namespace exl3 {

void check_device(const Tensor& t, const char* what);
void check_dtype(const Tensor& t, DType dtype, const char* what);
void check_f32_or_f16(const Tensor& t, const char* what);
void check_meta(const StepMeta& meta);
// k_pages and v_pages F16 [num_pages, page_size, kv_heads, head_dim], page_size == cache.page_size.
void check_cache(const PagedKv& cache);
PagedBatch paged_batch(const StepMeta& meta, int64_t page_size);

template <typename T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw());
}

template <typename T>
T* mut(Tensor& t) {
  return static_cast<T*>(t.mutable_raw());
}

}  // namespace exl3
