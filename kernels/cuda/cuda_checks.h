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
// kv_heads, head_dim, page_size > 0, window >= 0; per side, bits 16 with pages F16 [num_pages,
// page_size, kv_heads, head_dim], or bits 2..8 with kv_heads · head_dim % 32 == 0, words I32
// [num_pages, page_size, kv_heads · head_dim / 32 · bits] and scales F16 [num_pages, page_size,
// kv_heads · head_dim / 32]; both sides the same num_pages, which is returned.
int64_t check_cache(const PagedKv& cache);
PagedBatch paged_batch(const StepMeta& meta, int64_t page_size);
// The pointers and widths of a checked cache's sides as launch_kv_write / launch_attention take
// them (pages at 16 bits, words and scales otherwise; the unused ones null).
void set_cache_sides(PagedKv& cache, KvWriteParams& p);
void set_cache_sides(const PagedKv& cache, AttentionParams& p);

template <typename T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw());
}

template <typename T>
T* mut(Tensor& t) {
  return static_cast<T*>(t.mutable_raw());
}

}  // namespace exl3
