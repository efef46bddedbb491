// Paged KV cache storage and page allocation.
#include "worker/kv_cache.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace exl3 {

uint64_t KvCache::next_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::create(const KvCacheShape& shape, Backend& backend) {
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->shape_ = shape;
  EXL3_RETURN_IF_ERROR(cache->allocate(backend));
  return cache;
}

KvCache::KvCache(const KvCacheShape& shape, Backend& backend) : shape_(shape) { EXL3_CHECK_OK(allocate(backend)); }

absl::Status KvCache::validate(const KvCacheShape& shape) {
  if (shape.page_size <= 0 || shape.num_pages <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache needs pages: ", shape.num_pages, " pages of ", shape.page_size, " tokens"));
  }
  EXL3_RETURN_IF_ERROR(validate_kv_cache_bits(shape.bits(), "KV cache bits (K,V)"));
  if (shape.window < 0) return absl::InvalidArgumentError(absl::StrCat("KV cache window ", shape.window, " < 0"));
  for (int64_t heads : shape.layer_kv_heads) {
    EXL3_RETURN_IF_ERROR(check_kv_token_dim(heads * shape.head_dim, shape.bits()));
  }
  return absl::OkStatus();
}

absl::Status KvCache::allocate(Backend& backend) {
  const KvCacheShape& shape = shape_;
  EXL3_RETURN_IF_ERROR(validate(shape));
  for (size_t l = 0; l < shape.layer_kv_heads.size(); ++l) {
    const int64_t heads = shape.layer_kv_heads[l];
    PagedKv kv;
    kv.page_size = shape.page_size;
    kv.kv_heads = heads;
    kv.head_dim = shape.head_dim;
    kv.k_bits = shape.k_bits;
    kv.v_bits = shape.v_bits;
    kv.window = shape.window;
    const int64_t groups = heads * shape.head_dim / kKvGroupSize;
    // One part (keys or values): pages at 16 bits, else words and scales.
    auto allocate_part = [&](int bits, const char* what, Tensor& pages, Tensor& words, Tensor& scales) -> absl::Status {
      if (bits == 16) {
        EXL3_ASSIGN_OR_RETURN(
            pages, backend.allocate(backend.kv_dtype(), {shape.num_pages, shape.page_size, heads, shape.head_dim},
                                    absl::StrCat("KV cache ", what, " of layer ", l)));
        return absl::OkStatus();
      }
      EXL3_ASSIGN_OR_RETURN(words,
                            backend.allocate(DType::kI32, {shape.num_pages, shape.page_size, groups * bits},
                                             absl::StrCat("KV cache ", what, " (", bits, "-bit words) of layer ", l)));
      EXL3_ASSIGN_OR_RETURN(scales, backend.allocate(DType::kF16, {shape.num_pages, shape.page_size, groups},
                                                     absl::StrCat("KV cache ", what, " scales of layer ", l)));
      return absl::OkStatus();
    };
    EXL3_RETURN_IF_ERROR(allocate_part(shape.k_bits, "keys", kv.k_pages, kv.k_words, kv.k_scales));
    EXL3_RETURN_IF_ERROR(allocate_part(shape.v_bits, "values", kv.v_pages, kv.v_words, kv.v_scales));
    layers_.push_back(std::move(kv));
  }
  bytes_ = bytes_for(shape, dtype_size(backend.kv_dtype()));
  for (int64_t p = shape.num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
  return absl::OkStatus();
}

absl::Status KvCache::reserve(PageTable& table, int64_t tokens) {
  const int64_t needed = (tokens + shape_.page_size - 1) / shape_.page_size - static_cast<int64_t>(table.pages.size());
  if (needed <= 0) return absl::OkStatus();
  if (needed > free_pages()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache: ", tokens, " tokens need ", needed,
                                                     " more pages, only ", free_pages(), " of ", shape_.num_pages,
                                                     " are free"));
  }
  for (int64_t i = 0; i < needed; ++i) {
    table.pages.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void KvCache::release(PageTable& table) {
  for (int32_t p : table.pages) free_.push_back(p);
  table.pages.clear();
}

uint64_t KvCache::bytes_for(const KvCacheShape& s, uint64_t element_bytes) {
  uint64_t per_token = 0;
  for (int64_t h : s.layer_kv_heads) {
    per_token += kv_token_bytes(h * s.head_dim, s.k_bits, element_bytes) +
                 kv_token_bytes(h * s.head_dim, s.v_bits, element_bytes);
  }
  return per_token * static_cast<uint64_t>(s.num_pages) * static_cast<uint64_t>(s.page_size);
}

void KvCache::copy_page(int32_t src, int32_t dst, Backend& backend) {
  EXL3_CHECK(src >= 0 && src < shape_.num_pages && dst >= 0 && dst < shape_.num_pages && src != dst, "copy of page ",
             src, " onto page ", dst, " of ", shape_.num_pages);
  for (PagedKv& kv : layers_) {
    for (Tensor* t : {&kv.k_pages, &kv.v_pages, &kv.k_words, &kv.k_scales, &kv.v_words, &kv.v_scales}) {
      if (!t->defined() || t->numel() == 0) continue;
      // [num_pages, rest...] seen as rows of one page each.
      const Tensor pages = t->reshape({t->dim(0), t->numel() / t->dim(0)});
      Tensor to = pages.rows(dst, 1);
      backend.copy_columns(pages.rows(src, 1), to, 0);
    }
  }
}

}  // namespace exl3
