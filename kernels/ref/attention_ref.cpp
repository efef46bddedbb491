// Reference causal (optionally sliding-window) grouped-query attention of one sequence over its
// paged KV cache, full-precision or quantized (exl3-format.md §9: each row dequantized group by
// group as it is read).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops.h"

namespace exl3 {
namespace {

// The whole token row (kv_heads · head_dim floats) of cache row `slot` of one side.
void read_row(const Tensor& pages, const Tensor& words, const Tensor& scales, int bits, int64_t row_len, int64_t slot,
              float* out) {
  if (bits == 16) {
    std::copy_n(pages.data<float>() + slot * row_len, row_len, out);
    return;
  }
  const int64_t groups = row_len / 32;
  const auto* w = reinterpret_cast<const uint32_t*>(words.data<int32_t>()) + slot * groups * bits;
  const auto* s = static_cast<const uint16_t*>(scales.raw()) + slot * groups;
  for (int64_t g = 0; g < groups; ++g) kv_dequantize_group_ref(w + g * bits, s[g], bits, out + g * 32);
}

}  // namespace

Tensor attention_ref(const Tensor& q, const PagedKv& cache, std::span<const int32_t> page_table,
                     std::span<const int32_t> positions) {
  EXL3_CHECK(q.rank() == 3, "attention_ref needs q [tokens, heads, head_dim]");
  const int64_t tokens = q.dim(0), heads = q.dim(1), head_dim = q.dim(2);
  const int64_t kv_heads = cache.kv_heads;
  EXL3_CHECK(kv_heads > 0 && heads % kv_heads == 0 && cache.head_dim == head_dim, "attention_ref: head layout: ", heads,
             " heads of ", head_dim, " over kv_heads ", kv_heads, " head_dim ", cache.head_dim);
  EXL3_CHECK(cache.k_bits == 16 || (cache.k_bits >= 2 && cache.k_bits <= 8), "attention_ref: k_bits ", cache.k_bits);
  EXL3_CHECK(cache.v_bits == 16 || (cache.v_bits >= 2 && cache.v_bits <= 8), "attention_ref: v_bits ", cache.v_bits);
  EXL3_CHECK(cache.window >= 0, "attention_ref: window ", cache.window);
  EXL3_CHECK_EQ(static_cast<int64_t>(positions.size()), tokens);
  const int64_t group = heads / kv_heads;
  const int64_t row_len = kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  auto slot_of = [&](int64_t pos) {
    return page_table[pos / cache.page_size] * cache.page_size + pos % cache.page_size;
  };

  Tensor out = Tensor::zeros(DType::kF32, q.shape());
  float* o = out.mutable_data<float>();
  std::vector<float> scores, keys, values;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t last = positions[t];
    EXL3_CHECK(last >= 0 && last / cache.page_size < static_cast<int64_t>(page_table.size()), "position ", last);
    const int64_t first = cache.window > 0 ? std::max<int64_t>(0, last - cache.window + 1) : 0;
    const int64_t n = last - first + 1;
    keys.resize(n * row_len);
    values.resize(n * row_len);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = slot_of(first + i);
      read_row(cache.k_pages, cache.k_words, cache.k_scales, cache.k_bits, row_len, slot, keys.data() + i * row_len);
      read_row(cache.v_pages, cache.v_words, cache.v_scales, cache.v_bits, row_len, slot, values.data() + i * row_len);
    }
    scores.assign(n, 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      const float* qv = q.data<float>() + (t * heads + h) * head_dim;
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < n; ++i) {
        const float* kv = keys.data() + i * row_len + kvh * head_dim;
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qv[d]) * kv[d];
        scores[i] = static_cast<float>(dot) * scale;
      }
      softmax_ref(scores.data(), 1, n);
      float* ov = o + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < n; ++i) {
        const float* vv = values.data() + i * row_len + kvh * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) ov[d] += scores[i] * vv[d];
      }
    }
  }
  return out;
}

}  // namespace exl3
