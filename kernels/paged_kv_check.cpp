// The layout check of a PagedKv shared by the backends (paged_kv_check.h).
#include "kernels/paged_kv_check.h"

#include "kernels/check.h"

namespace exl3 {
namespace {

void check_tensor(const Tensor& t, Device device, DType dtype, const char* what) {
  EXL3_CHECK(t.defined() && t.device() == device, what, " must be a defined ", device_name(device), " tensor");
  EXL3_CHECK(t.dtype() == dtype, what, " must be ", dtype_name(dtype), ", got ", dtype_name(t.dtype()));
}

// One side of a cache; returns its page count.
int64_t check_side(const Tensor& pages, const Tensor& words, const Tensor& scales, int bits, const PagedKv& c,
                   Device device, DType kv_dtype, const char* what) {
  if (bits == 16) {
    check_tensor(pages, device, kv_dtype, what);
    EXL3_CHECK(pages.rank() == 4 && pages.dim(1) == c.page_size && pages.dim(2) == c.kv_heads &&
                   pages.dim(3) == c.head_dim,
               what, " pages ", shape_string(pages.shape()), " for page_size ", c.page_size, " kv_heads ", c.kv_heads,
               " head_dim ", c.head_dim);
    return pages.dim(0);
  }
  const int64_t row = c.kv_heads * c.head_dim;
  EXL3_CHECK(bits >= 2 && bits <= 8 && row % 32 == 0, what, ": bits ", bits, " (2..8 or 16) with a row of ", row,
             " (a multiple of 32 when quantized)");
  check_tensor(words, device, DType::kI32, what);
  check_tensor(scales, device, DType::kF16, what);
  EXL3_CHECK(words.rank() == 3 && words.dim(1) == c.page_size && words.dim(2) == row / 32 * bits, what, " words ",
             shape_string(words.shape()), " for ", bits, " bits of a row of ", row);
  EXL3_CHECK(scales.rank() == 3 && scales.dim(0) == words.dim(0) && scales.dim(1) == c.page_size &&
                 scales.dim(2) == row / 32,
             what, " scales ", shape_string(scales.shape()));
  return words.dim(0);
}

}  // namespace

int64_t check_paged_kv(const PagedKv& cache, Device device, DType kv_dtype) {
  EXL3_CHECK(cache.kv_heads > 0 && cache.head_dim > 0 && cache.page_size > 0 && cache.window >= 0, "cache: kv_heads ",
             cache.kv_heads, " head_dim ", cache.head_dim, " page_size ", cache.page_size, " window ", cache.window);
  const int64_t k = check_side(cache.k_pages, cache.k_words, cache.k_scales, cache.k_bits, cache, device, kv_dtype,
                               "cache keys");
  const int64_t v = check_side(cache.v_pages, cache.v_words, cache.v_scales, cache.v_bits, cache, device, kv_dtype,
                               "cache values");
  EXL3_CHECK(k == v, "cache: ", k, " key pages but ", v, " value pages");
  return k;
}

}  // namespace exl3
