// CPU backend attention for a batch of sequences: per sequence and KV head, gather the cached
// keys/values into contiguous rows and use BLAS for Q·Kᵀ and P·V. Same contract as attention_ref,
// against which it is tested.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace exl3 {
namespace {

void softmax_row(float* row, int64_t n) {
  const float max = *std::max_element(row, row + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    row[i] = std::exp(row[i] - max);
    sum += row[i];
  }
  for (int64_t i = 0; i < n; ++i) row[i] /= sum;
}

// One sequence's tokens (consecutive rows `first`.. of q/out, positions `pos`).
void attend_sequence(const float* q, const PagedKv& cache, const int32_t* pages, const int32_t* pos,
                     int64_t tokens, int64_t heads, float* out) {
  const int64_t kv_heads = cache.k_pages.dim(2), head_dim = cache.k_pages.dim(3);
  const int64_t n_keys = *std::max_element(pos, pos + tokens) + 1;
  const int64_t group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const float* kp = static_cast<const float*>(cache.k_pages.raw());
  const float* vp = static_cast<const float*>(cache.v_pages.raw());
  std::vector<float> keys(n_keys * head_dim), values(n_keys * head_dim), scores(tokens * n_keys);
  const int ld = static_cast<int>(heads * head_dim);
  for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
    for (int64_t p = 0; p < n_keys; ++p) {
      const int64_t page = pages[p / cache.page_size];
      const int64_t src = ((page * cache.page_size + p % cache.page_size) * kv_heads + kvh) * head_dim;
      std::copy_n(kp + src, head_dim, keys.data() + p * head_dim);
      std::copy_n(vp + src, head_dim, values.data() + p * head_dim);
    }
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens), static_cast<int>(n_keys),
                  static_cast<int>(head_dim), scale, q + h * head_dim, ld, keys.data(), static_cast<int>(head_dim),
                  0.0f, scores.data(), static_cast<int>(n_keys));
      for (int64_t t = 0; t < tokens; ++t) {
        float* row = scores.data() + t * n_keys;
        for (int64_t p = pos[t] + 1; p < n_keys; ++p) row[p] = -std::numeric_limits<float>::infinity();
        softmax_row(row, n_keys);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tokens), static_cast<int>(head_dim),
                  static_cast<int>(n_keys), 1.0f, scores.data(), static_cast<int>(n_keys), values.data(),
                  static_cast<int>(head_dim), 0.0f, out + h * head_dim, ld);
    }
  }
}

}  // namespace

void attention_cpu(const float* q, const PagedKv& cache, const CpuPagedBatch& b, int64_t heads, float* out) {
  const int64_t row = heads * cache.k_pages.dim(3);
  // Tokens of one sequence are consecutive in a batch; attend run by run.
  int64_t first = 0;
  while (first < b.tokens) {
    int64_t end = first + 1;
    while (end < b.tokens && b.token_seq[end] == b.token_seq[first]) ++end;
    attend_sequence(q + first * row, cache, b.page_table + b.token_seq[first] * b.max_pages, b.positions + first,
                    end - first, heads, out + first * row);
    first = end;
  }
}

}  // namespace exl3
