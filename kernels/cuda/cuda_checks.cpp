// Operand checks of the CUDA backend (cuda_checks.h).
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

void check_cache(const PagedKv& cache) {
  check_dtype(cache.k_pages, DType::kF16, "cache.k_pages");
  check_dtype(cache.v_pages, DType::kF16, "cache.v_pages");
  EXL3_CHECK(cache.k_pages.rank() == 4 && cache.k_pages.shape() == cache.v_pages.shape(), "cache: k_pages ",
             shape_string(cache.k_pages.shape()), " v_pages ", shape_string(cache.v_pages.shape()));
  EXL3_CHECK(cache.page_size > 0 && cache.k_pages.dim(1) == cache.page_size, "cache: page_size ", cache.page_size,
             " vs pages ", shape_string(cache.k_pages.shape()));
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

}  // namespace exl3
