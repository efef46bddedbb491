// A zeroed paged KV cache of one layer for the kernel tests, at any key/value widths: pages at 16
// bits, else quantized words and fp16 scales (the layout of worker/kv_cache.cpp, without the
// allocator), on whatever memory `zeros` gives.
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace exl3::testing {

struct CacheSpec {
  int64_t num_pages, page_size, kv_heads, head_dim;
  int k_bits, v_bits;
  int64_t window;
};

// zeros(dtype, shape) makes each zeroed tensor; 16-bit pages are `page_dtype`.
template <typename Zeros>
PagedKv make_paged_kv(const CacheSpec& s, DType page_dtype, Zeros&& zeros) {
  PagedKv c;
  c.page_size = s.page_size;
  c.kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.k_bits = s.k_bits;
  c.v_bits = s.v_bits;
  c.window = s.window;
  const int64_t groups = s.kv_heads * s.head_dim / 32;
  const Shape pages{s.num_pages, s.page_size, s.kv_heads, s.head_dim};
  const auto part = [&](int bits, Tensor& full, Tensor& words, Tensor& scales) {
    if (bits == 16) {
      full = zeros(page_dtype, pages);
    } else {
      words = zeros(DType::kI32, {s.num_pages, s.page_size, groups * bits});
      scales = zeros(DType::kF16, {s.num_pages, s.page_size, groups});
    }
  };
  part(s.k_bits, c.k_pages, c.k_words, c.k_scales);
  part(s.v_bits, c.v_pages, c.v_words, c.v_scales);
  return c;
}

// The reference cache: host memory, F32 pages at 16 bits.
inline PagedKv host_paged_kv(const CacheSpec& s) {
  return make_paged_kv(s, DType::kF32, [](DType dtype, const Shape& shape) { return Tensor::zeros(dtype, shape); });
}

}  // namespace exl3::testing
