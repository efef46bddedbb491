// Dense reference ops against hand-computed values, and the CPU backend (BLAS matmul and
// attention) against the references.
#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

Tensor random_tensor(Shape shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::zeros(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = dist(rng);
  return t;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float m = 0.0f;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// A full-precision F32 cache of pages [num_pages, page_size, kv_heads, head_dim].
PagedKv f32_cache(const Shape& pages) {
  PagedKv c;
  c.k_pages = Tensor::zeros(DType::kF32, pages);
  c.v_pages = Tensor::zeros(DType::kF32, pages);
  c.page_size = pages[1];
  c.kv_heads = pages[2];
  c.head_dim = pages[3];
  return c;
}

TEST(DenseOps, MatmulRefSmallExact) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor w = Tensor::from_vector<float>({1, 0, 0, 1, 2, -1}, {3, 2});
  const Tensor y = matmul_ref(x, w);
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 4), (std::vector<float>{7, -1, 16, -1}));
}

TEST(DenseOps, BlasMatmulMatchesRef) {
  const Tensor x = random_tensor({7, 300}, 1), w = random_tensor({300, 129}, 2);
  Tensor y = Tensor::zeros(DType::kF32, {x.dim(0), w.dim(1)});
  matmul_cpu(x.data<float>(), w.data<float>(), y.mutable_data<float>(), x.dim(0), x.dim(1), w.dim(1));
  EXPECT_LT(max_abs_diff(y, matmul_ref(x, w)), 2e-4f);
}

TEST(DenseOps, RmsNormHandComputed) {
  const Tensor x = Tensor::from_vector<float>({3, 4, 0, 0}, {1, 4});
  const Tensor w = Tensor::from_vector<float>({1, 2, 1, 1}, {4});
  const Tensor y = rms_norm_ref(x, w, 0.0f);  // rms = sqrt(25/4) = 2.5
  EXPECT_FLOAT_EQ(y.data<float>()[0], 1.2f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 3.2f);
  EXPECT_FLOAT_EQ(y.data<float>()[2], 0.0f);
}

TEST(DenseOps, SoftmaxSiluEmbeddingAdd) {
  std::vector<float> row = {0.0f, std::log(3.0f)};
  softmax_ref(row.data(), 1, 2);
  EXPECT_NEAR(row[0], 0.25f, 1e-7);
  EXPECT_NEAR(row[1], 0.75f, 1e-7);

  const Tensor g = Tensor::from_vector<float>({0.0f, 2.0f}, {2});
  const Tensor u = Tensor::from_vector<float>({5.0f, 3.0f}, {2});
  const Tensor s = silu_mul_ref(g, u);
  EXPECT_FLOAT_EQ(s.data<float>()[0], 0.0f);
  EXPECT_NEAR(s.data<float>()[1], 2.0f / (1.0f + std::exp(-2.0f)) * 3.0f, 1e-6);

  const Tensor table = Tensor::from_vector<float>({0, 1, 10, 11, 20, 21}, {3, 2});
  const std::vector<int32_t> ids = {2, 0};
  Tensor e = embedding_ref(table, ids);
  EXPECT_EQ(std::vector<float>(e.data<float>(), e.data<float>() + 4), (std::vector<float>{20, 21, 0, 1}));
  add_inplace_ref(e, e);
  EXPECT_FLOAT_EQ(e.data<float>()[1], 42.0f);
}

TEST(DenseOps, RopeRotatesHalvesByPositionAngle) {
  // head_dim 4, rotary over all dims: pairs (0,2) and (1,3) rotate by pos*inv_freq[i].
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 4});
  const std::vector<int32_t> pos = {3};
  const std::vector<float> inv_freq = {0.5f, 0.1f};
  rope_ref(x, pos, inv_freq, 2.0f);
  const double a0 = 1.5, a1 = 0.3;
  EXPECT_NEAR(x.data<float>()[0], 2 * (1 * std::cos(a0) - 3 * std::sin(a0)), 1e-5);
  EXPECT_NEAR(x.data<float>()[2], 2 * (3 * std::cos(a0) + 1 * std::sin(a0)), 1e-5);
  EXPECT_NEAR(x.data<float>()[1], 2 * (2 * std::cos(a1) - 4 * std::sin(a1)), 1e-5);
  EXPECT_NEAR(x.data<float>()[3], 2 * (4 * std::cos(a1) + 2 * std::sin(a1)), 1e-5);
}

// One query attending to two cached positions, computed by hand.
TEST(DenseOps, AttentionRefHandComputed) {
  PagedKv cache = f32_cache({2, 2, 1, 2});
  const std::vector<int32_t> pages = {1};
  const std::vector<int32_t> positions = {0, 1};
  kv_write_ref(cache, pages, positions, Tensor::from_vector<float>({1, 0, 0, 1}, {2, 1, 2}),
               Tensor::from_vector<float>({10, 0, 0, 20}, {2, 1, 2}));
  EXPECT_EQ(cache.k_pages.data<float>()[4], 1.0f);  // page 1, slot 0
  const Tensor q = Tensor::from_vector<float>({std::sqrt(2.0f) * std::log(3.0f), 0}, {1, 1, 2});
  const std::vector<int32_t> qpos = {1};
  const Tensor o = attention_ref(q, cache, pages, qpos);
  // scores: [ln 3, 0] -> softmax [0.75, 0.25]
  EXPECT_NEAR(o.data<float>()[0], 7.5f, 1e-5);
  EXPECT_NEAR(o.data<float>()[1], 5.0f, 1e-5);
}

// GQA over non-contiguous pages with a chunk of queries at arbitrary positions.
TEST(DenseOps, BlasAttentionMatchesRef) {
  const int64_t heads = 6, kv_heads = 2, head_dim = 16, page_size = 4, tokens = 13;
  PagedKv cache = f32_cache({8, page_size, kv_heads, head_dim});
  const std::vector<int32_t> pages = {5, 0, 7, 2};
  std::vector<int32_t> positions(tokens);
  for (int64_t i = 0; i < tokens; ++i) positions[i] = static_cast<int32_t>(i + 2);
  kv_write_ref(cache, pages, positions, random_tensor({tokens, kv_heads, head_dim}, 3),
               random_tensor({tokens, kv_heads, head_dim}, 4));
  const std::vector<int32_t> first = {0, 1};
  kv_write_ref(cache, pages, first, random_tensor({2, kv_heads, head_dim}, 5), random_tensor({2, kv_heads, head_dim}, 6));
  const Tensor q = random_tensor({tokens, heads, head_dim}, 7);
  const std::vector<int32_t> token_seq(tokens, 0);
  const CpuPagedBatch batch{positions.data(), token_seq.data(), pages.data(), tokens, 1,
                            static_cast<int64_t>(pages.size())};
  Tensor out = Tensor::zeros(DType::kF32, q.shape());
  attention_cpu(q.data<float>(), cache, batch, heads, out.mutable_data<float>());
  EXPECT_LT(max_abs_diff(out, attention_ref(q, cache, pages, positions)), 1e-5f);
}

}  // namespace
}  // namespace exl3
