// Reference paged KV-cache write: token rows go to page_table[p / page_size], slot p % page_size,
// copied for a full-precision side, quantized per 32-element group (exl3-format.md §9) otherwise.
#include <algorithm>

#include "kernels/ops.h"

namespace exl3 {
namespace {

// Writes `row` (kv_heads · head_dim floats) into cache row `slot` (page · page_size + p % page_size)
// of one side: pages F32 at 16 bits, words/scales otherwise.
void write_row(Tensor& pages, Tensor& words, Tensor& scales, int bits, int64_t row_len, int64_t slot,
               const float* row) {
  if (bits == 16) {
    std::copy_n(row, row_len, pages.mutable_data<float>() + slot * row_len);
    return;
  }
  const int64_t groups = row_len / 32;
  auto* w = reinterpret_cast<uint32_t*>(words.mutable_data<int32_t>()) + slot * groups * bits;
  auto* s = static_cast<uint16_t*>(scales.mutable_raw()) + slot * groups;
  for (int64_t g = 0; g < groups; ++g) kv_quantize_group_ref(row + g * 32, bits, w + g * bits, s + g);
}

void check_side(const Tensor& pages, const Tensor& words, const Tensor& scales, int bits, const PagedKv& c,
                const char* what) {
  const int64_t row_len = c.kv_heads * c.head_dim;
  if (bits == 16) {
    EXL3_CHECK(pages.dtype() == DType::kF32 && pages.rank() == 4 && pages.dim(1) == c.page_size &&
                   pages.dim(2) == c.kv_heads && pages.dim(3) == c.head_dim,
               what, " pages ", shape_string(pages.shape()), " for kv_heads ", c.kv_heads, " head_dim ", c.head_dim);
    return;
  }
  EXL3_CHECK(bits >= 2 && bits <= 8 && row_len % 32 == 0, what, " bits ", bits, " with row ", row_len);
  EXL3_CHECK(words.dtype() == DType::kI32 && words.rank() == 3 && words.dim(1) == c.page_size &&
                 words.dim(2) == row_len / 32 * bits,
             what, " words ", shape_string(words.shape()));
  EXL3_CHECK(scales.dtype() == DType::kF16 && scales.rank() == 3 && scales.dim(0) == words.dim(0) &&
                 scales.dim(1) == c.page_size && scales.dim(2) == row_len / 32,
             what, " scales ", shape_string(scales.shape()));
}

int64_t side_pages(const Tensor& pages, const Tensor& words, int bits) {
  return bits == 16 ? pages.dim(0) : words.dim(0);
}

}  // namespace

void kv_write_ref(PagedKv& cache, std::span<const int32_t> page_table, std::span<const int32_t> positions,
                  const Tensor& k, const Tensor& v) {
  EXL3_CHECK(cache.kv_heads > 0 && cache.head_dim > 0 && cache.page_size > 0, "kv_write_ref: kv_heads ", cache.kv_heads,
             " head_dim ", cache.head_dim, " page_size ", cache.page_size);
  check_side(cache.k_pages, cache.k_words, cache.k_scales, cache.k_bits, cache, "kv_write_ref: keys");
  check_side(cache.v_pages, cache.v_words, cache.v_scales, cache.v_bits, cache, "kv_write_ref: values");
  const int64_t num_pages = side_pages(cache.k_pages, cache.k_words, cache.k_bits);
  EXL3_CHECK_EQ(side_pages(cache.v_pages, cache.v_words, cache.v_bits), num_pages, "kv_write_ref: K/V page counts");
  const int64_t row = cache.kv_heads * cache.head_dim;
  EXL3_CHECK(k.shape() == v.shape() && k.numel() == static_cast<int64_t>(positions.size()) * row, "kv_write_ref: k ",
             shape_string(k.shape()), " v ", shape_string(v.shape()));
  for (size_t t = 0; t < positions.size(); ++t) {
    const int64_t p = positions[t];
    const int64_t logical_page = p / cache.page_size;
    EXL3_CHECK(p >= 0 && logical_page < static_cast<int64_t>(page_table.size()), "position ", p,
               " beyond the sequence's ", page_table.size(), " pages");
    const int64_t page = page_table[logical_page];
    EXL3_CHECK(page >= 0 && page < num_pages, "page ", page, " outside the cache");
    const int64_t slot = page * cache.page_size + p % cache.page_size;
    write_row(cache.k_pages, cache.k_words, cache.k_scales, cache.k_bits, row, slot, k.data<float>() + t * row);
    write_row(cache.v_pages, cache.v_words, cache.v_scales, cache.v_bits, row, slot, v.data<float>() + t * row);
  }
}

}  // namespace exl3
