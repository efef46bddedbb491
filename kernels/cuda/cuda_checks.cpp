// Operand checks of the CUDA backend and the cache sides as the kernels take them (cuda_checks.h).
#include "kernels/cuda/cuda_checks.h"

#include "kernels/check.h"
#include "kernels/paged_kv_check.h"

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

int64_t check_cache(const PagedKv& cache) { return check_paged_kv(cache, Device::kCuda, DType::kF16); }

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
