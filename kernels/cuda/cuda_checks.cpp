// Operand checks of the CUDA backend and the cache sides as the kernels take them (cuda_checks.h).
#include "kernels/cuda/cuda_checks.h"

#include "kernels/check.h"

namespace exl3 {

void check_device(const Tensor& t, const char* what) {
  EXL3_CHECK(t.defined() && t.device() == Device::kCuda, what, " must be a defined cuda tensor");
}

void check_dtype(const Tensor& t, DType dtype, const char* what) {
  check_device(t, what);
  EXL3_CHECK(t.dtype() == dtype, what, " must be ", dtype_name(dtype), ", got ", dtype_name(t.dtype()));
}

void check_f32_or_f16(const Tensor& t, const char* what) {
  check_device(t, what);
  EXL3_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF16, what, " must be F32 or F16, got ",
             dtype_name(t.dtype()));
}

void check_meta(const StepMeta& meta) {
  check_dtype(meta.positions, DType::kI32, "meta.positions");
  check_dtype(meta.token_seq, DType::kI32, "meta.token_seq");
  check_dtype(meta.page_table, DType::kI32, "meta.page_table");
  EXL3_CHECK(
      meta.num_tokens >= 0 && meta.positions.numel() == meta.num_tokens && meta.token_seq.numel() == meta.num_tokens,
      "meta: ", meta.num_tokens, " tokens but positions ", shape_string(meta.positions.shape()), " token_seq ",
      shape_string(meta.token_seq.shape()));
  EXL3_CHECK(meta.page_table.numel() == meta.num_seqs * meta.max_pages, "meta: page_table ",
             shape_string(meta.page_table.shape()), " for ", meta.num_seqs, " sequences of ", meta.max_pages, " pages");
}

namespace {

int64_t check_cache_side(const Tensor& pages, const Tensor& words, const Tensor& scales, int bits, const PagedKv& c,
                         const char* what) {
  if (bits == 16) {
    check_dtype(pages, DType::kF16, what);
    EXL3_CHECK(pages.rank() == 4 && pages.dim(1) == c.page_size && pages.dim(2) == c.kv_heads &&
                   pages.dim(3) == c.head_dim,
               what, " pages ", shape_string(pages.shape()), " for page_size ", c.page_size, " kv_heads ", c.kv_heads,
               " head_dim ", c.head_dim);
    return pages.dim(0);
  }
  const int64_t row = c.kv_heads * c.head_dim;
  EXL3_CHECK(bits >= 2 && bits <= 8 && row % 32 == 0, what, ": bits ", bits, " (2..8 or 16) with a row of ", row,
             " (a multiple of 32 when quantized)");
  check_dtype(words, DType::kI32, what);
  check_dtype(scales, DType::kF16, what);
  EXL3_CHECK(words.rank() == 3 && words.dim(1) == c.page_size && words.dim(2) == row / 32 * bits, what, " words ",
             shape_string(words.shape()), " for ", bits, " bits of a row of ", row);
  EXL3_CHECK(scales.rank() == 3 && scales.dim(0) == words.dim(0) && scales.dim(1) == c.page_size &&
                 scales.dim(2) == row / 32,
             what, " scales ", shape_string(scales.shape()));
  return words.dim(0);
}

}  // namespace

int64_t check_cache(const PagedKv& cache) {
  EXL3_CHECK(cache.kv_heads > 0 && cache.head_dim > 0 && cache.page_size > 0 && cache.window >= 0, "cache: kv_heads ",
             cache.kv_heads, " head_dim ", cache.head_dim, " page_size ", cache.page_size, " window ", cache.window);
  const int64_t k = check_cache_side(cache.k_pages, cache.k_words, cache.k_scales, cache.k_bits, cache, "cache keys");
  const int64_t v =
      check_cache_side(cache.v_pages, cache.v_words, cache.v_scales, cache.v_bits, cache, "cache values");
  EXL3_CHECK(k == v, "cache: ", k, " key pages but ", v, " value pages");
  return k;
}

PagedBatch paged_batch(const StepMeta& meta, int64_t page_size) {
  PagedBatch b;
  b.positions = ptr<int32_t>(meta.positions);
  b.token_seq = ptr<int32_t>(meta.token_seq);
  b.page_table = ptr<int32_t>(meta.page_table);
  b.tokens = meta.num_tokens;
  b.num_seqs = meta.num_seqs;
  b.max_pages = meta.max_pages;
  b.page_size = page_size;
  b.max_position = meta.max_position;
  return b;
}

namespace {

template <typename T>
T* mut_or_null(Tensor& t) {
  return t.defined() ? mut<T>(t) : nullptr;
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? ptr<T>(t) : nullptr;
}

}  // namespace

void set_cache_sides(PagedKv& cache, KvWriteParams& p) {
  p.k_bits = cache.k_bits;
  p.v_bits = cache.v_bits;
  p.k_pages = cache.k_bits == 16 ? mut_or_null<__half>(cache.k_pages) : nullptr;
  p.v_pages = cache.v_bits == 16 ? mut_or_null<__half>(cache.v_pages) : nullptr;
  p.k_words = cache.k_bits == 16 ? nullptr : mut_or_null<uint32_t>(cache.k_words);
  p.k_scales = cache.k_bits == 16 ? nullptr : mut_or_null<__half>(cache.k_scales);
  p.v_words = cache.v_bits == 16 ? nullptr : mut_or_null<uint32_t>(cache.v_words);
  p.v_scales = cache.v_bits == 16 ? nullptr : mut_or_null<__half>(cache.v_scales);
}

void set_cache_sides(const PagedKv& cache, AttentionParams& p) {
  p.k_bits = cache.k_bits;
  p.v_bits = cache.v_bits;
  p.k_pages = cache.k_bits == 16 ? ptr_or_null<__half>(cache.k_pages) : nullptr;
  p.v_pages = cache.v_bits == 16 ? ptr_or_null<__half>(cache.v_pages) : nullptr;
  p.k_words = cache.k_bits == 16 ? nullptr : ptr_or_null<uint32_t>(cache.k_words);
  p.k_scales = cache.k_bits == 16 ? nullptr : ptr_or_null<__half>(cache.k_scales);
  p.v_words = cache.v_bits == 16 ? nullptr : ptr_or_null<uint32_t>(cache.v_words);
  p.v_scales = cache.v_bits == 16 ? nullptr : ptr_or_null<__half>(cache.v_scales);
}

}  // namespace exl3
