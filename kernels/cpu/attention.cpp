// CPU backend attention: per KV head, gather the cached keys/values into contiguous rows and use
// BLAS for Q·Kᵀ and P·V. Same contract as attention_ref, against which it is tested.
#include <cblas.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace exl3 {

Tensor attention(const Tensor& q, const PagedKv& cache, std::span<const int32_t> page_table,
                 std::span<const int32_t> positions) {
  EXL3_CHECK(q.rank() == 3, "attention needs q [tokens, heads, head_dim]");
  const int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2);
  const int64_t kv_heads = cache.k_pages.dim(2);
  EXL3_CHECK(heads % kv_heads == 0 && cache.k_pages.dim(3) == head_dim, "attention: head layout");
  EXL3_CHECK_EQ(static_cast<int64_t>(positions.size()), tokens);
  Tensor out = Tensor::zeros(DType::kF32, q.shape());
  if (tokens == 0) return out;
  int64_t max_pos = 0;
  for (int32_t p : positions) {
    EXL3_CHECK(p >= 0 && p / cache.page_size < static_cast<int64_t>(page_table.size()), "position ", p);
    max_pos = std::max<int64_t>(max_pos, p);
  }
  const int64_t n_keys = max_pos + 1;
  const int64_t group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const float* kp = cache.k_pages.data<float>();
  const float* vp = cache.v_pages.data<float>();

  std::vector<float> keys(n_keys * head_dim), values(n_keys * head_dim), scores(tokens * n_keys);
  for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
    for (int64_t p = 0; p < n_keys; ++p) {
      const int64_t page = page_table[p / cache.page_size];
      const int64_t src = ((page * cache.page_size + p % cache.page_size) * kv_heads + kvh) * head_dim;
      std::copy_n(kp + src, head_dim, keys.data() + p * head_dim);
      std::copy_n(vp + src, head_dim, values.data() + p * head_dim);
    }
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* qh = q.data<float>() + h * head_dim;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens), static_cast<int>(n_keys),
                  static_cast<int>(head_dim), scale, qh, static_cast<int>(heads * head_dim), keys.data(),
                  static_cast<int>(head_dim), 0.0f, scores.data(), static_cast<int>(n_keys));
      for (int64_t t = 0; t < tokens; ++t) {
        float* row = scores.data() + t * n_keys;
        for (int64_t p = positions[t] + 1; p < n_keys; ++p) row[p] = -std::numeric_limits<float>::infinity();
        softmax_ref(row, 1, n_keys);
      }
      float* oh = out.mutable_data<float>() + h * head_dim;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tokens), static_cast<int>(head_dim),
                  static_cast<int>(n_keys), 1.0f, scores.data(), static_cast<int>(n_keys), values.data(),
                  static_cast<int>(head_dim), 0.0f, oh, static_cast<int>(heads * head_dim));
    }
  }
  return out;
}

}  // namespace exl3
