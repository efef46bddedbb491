// CPU backend attention for a batch of sequences: per sequence and KV head, gather the cached
// keys/values a token can see (sliding window respected; quantized rows dequantized per gathered
// row, never the whole cache) into contiguous rows and use BLAS for Q·Kᵀ and P·V. Same contract as
// attention_ref, against which it is tested.
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

// Rows [first, first + n) of positions of one side for KV head `kvh` into out [n, head_dim]:
// copied from full-precision pages, or the groups covering the head dequantized.
void gather_side(const Tensor& pages, const Tensor& words, const Tensor& scales, int bits, const PagedKv& cache,
                 const int32_t* page_row, int64_t kvh, int64_t first, int64_t n, std::vector<float>& scratch,
                 float* out) {
  const int64_t head_dim = cache.head_dim, row = cache.kv_heads * head_dim;
  const int64_t begin = kvh * head_dim, end = begin + head_dim;
  const int64_t g0 = begin / 32, g1 = (end + 31) / 32;
  const int64_t groups = row / 32;
  scratch.resize(static_cast<size_t>((g1 - g0) * 32));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = first + i;
    const int64_t slot = page_row[p / cache.page_size] * cache.page_size + p % cache.page_size;
    if (bits == 16) {
      std::copy_n(static_cast<const float*>(pages.raw()) + slot * row + begin, head_dim, out + i * head_dim);
    } else {
      kv_dequantize_cpu(static_cast<const uint32_t*>(words.raw()) + (slot * groups + g0) * bits,
                        static_cast<const uint16_t*>(scales.raw()) + slot * groups + g0, bits, g1 - g0,
                        scratch.data());
      std::copy_n(scratch.data() + (begin - g0 * 32), head_dim, out + i * head_dim);
    }
  }
}

// One sequence's tokens (consecutive rows of q/out, positions `pos`). Only the keys some token
// sees are gathered: from the smallest window start to the largest position.
void attend_sequence(const float* q, const PagedKv& cache, const int32_t* pages, const int32_t* pos,
                     int64_t tokens, int64_t heads, float* out) {
  const int64_t kv_heads = cache.kv_heads, head_dim = cache.head_dim;
  auto window_start = [&](int64_t t) -> int64_t {
    return cache.window > 0 ? std::max<int64_t>(0, pos[t] - cache.window + 1) : 0;
  };
  int64_t first = window_start(0), last = pos[0];
  for (int64_t t = 1; t < tokens; ++t) {
    first = std::min(first, window_start(t));
    last = std::max<int64_t>(last, pos[t]);
  }
  const int64_t n_keys = last - first + 1;
  const int64_t group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> keys(n_keys * head_dim), values(n_keys * head_dim), scores(tokens * n_keys), scratch;
  const int ld = static_cast<int>(heads * head_dim);
  for (int64_t kvh = 0; kvh < kv_heads; ++kvh) {
    gather_side(cache.k_pages, cache.k_words, cache.k_scales, cache.k_bits, cache, pages, kvh, first, n_keys, scratch,
                keys.data());
    gather_side(cache.v_pages, cache.v_words, cache.v_scales, cache.v_bits, cache, pages, kvh, first, n_keys, scratch,
                values.data());
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens), static_cast<int>(n_keys),
                  static_cast<int>(head_dim), scale, q + h * head_dim, ld, keys.data(), static_cast<int>(head_dim),
                  0.0f, scores.data(), static_cast<int>(n_keys));
      for (int64_t t = 0; t < tokens; ++t) {
        float* row = scores.data() + t * n_keys;
        for (int64_t i = 0; i < window_start(t) - first; ++i) row[i] = -std::numeric_limits<float>::infinity();
        for (int64_t i = pos[t] + 1 - first; i < n_keys; ++i) row[i] = -std::numeric_limits<float>::infinity();
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
  const int64_t row = heads * cache.head_dim;
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
