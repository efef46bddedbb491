// Reference causal grouped-query attention of one sequence over its paged KV cache.
#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace exl3 {

Tensor attention_ref(const Tensor& q, const PagedKv& cache, std::span<const int32_t> page_table,
                     std::span<const int32_t> positions) {
  EXL3_CHECK(q.rank() == 3, "attention_ref needs q [tokens, heads, head_dim]");
  const int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2);
  const int64_t kv_heads = cache.k_pages.dim(2);
  EXL3_CHECK(heads % kv_heads == 0 && cache.k_pages.dim(3) == head_dim, "attention_ref: head layout");
  EXL3_CHECK_EQ(static_cast<int64_t>(positions.size()), tokens);
  const int64_t group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const float* kp = cache.k_pages.data<float>();
  const float* vp = cache.v_pages.data<float>();
  auto cache_row = [&](int64_t pos, int64_t kvh) {
    const int64_t page = page_table[pos / cache.page_size];
    return ((page * cache.page_size + pos % cache.page_size) * kv_heads + kvh) * head_dim;
  };

  Tensor out = Tensor::zeros(DType::kF32, q.shape());
  float* o = out.mutable_data<float>();
  std::vector<float> scores;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t last = positions[t];
    EXL3_CHECK(last >= 0 && last / cache.page_size < static_cast<int64_t>(page_table.size()), "position ", last);
    scores.assign(last + 1, 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      const float* qv = q.data<float>() + (t * heads + h) * head_dim;
      const int64_t kvh = h / group;
      for (int64_t p = 0; p <= last; ++p) {
        const float* kv = kp + cache_row(p, kvh);
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qv[d]) * kv[d];
        scores[p] = static_cast<float>(dot) * scale;
      }
      softmax_ref(scores.data(), 1, last + 1);
      float* ov = o + (t * heads + h) * head_dim;
      for (int64_t p = 0; p <= last; ++p) {
        const float* vv = vp + cache_row(p, kvh);
        for (int64_t d = 0; d < head_dim; ++d) ov[d] += scores[p] * vv[d];
      }
    }
  }
  return out;
}

}  // namespace exl3
