// The layout check of a PagedKv (ops.h) as a backend takes it, shared by the CPU and CUDA backends
// (a broken contract is a caller bug: EXL3_CHECK aborts naming the side and tensor).
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace exl3 {

// kv_heads, head_dim, page_size > 0, window >= 0; per side, bits 16 with pages of `kv_dtype`
// [num_pages, page_size, kv_heads, head_dim], or bits 2..8 with kv_heads · head_dim % 32 == 0,
// words I32 [num_pages, page_size, kv_heads · head_dim / 32 · bits] and scales F16 [num_pages,
// page_size, kv_heads · head_dim / 32]; every tensor used defined on `device`; both sides the same
// num_pages, which is returned.
int64_t check_paged_kv(const PagedKv& cache, Device device, DType kv_dtype);

}  // namespace exl3
