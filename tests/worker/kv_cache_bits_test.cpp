// KV cache widths: --cache-bits parsing (K,V or N; 2..8 or 16; errors name the flag), the bytes of
// one token at each width (hand-computed), what KvCache allocates per width (dtypes and shapes of
// exl3-format.md §9: I32 words [pages, page_size, dim/32*bits], F16 scales [pages, page_size,
// dim/32], kv_dtype pages at 16), its refusal of a quantized cache whose token vector is not a
// multiple of 32, and the window it hands every layer.
#include <memory>

#include "gtest/gtest.h"
#include "worker/kv_cache.h"

namespace exl3 {
namespace {

TEST(KvCacheBits, ParsesPairsSinglesAndFp16) {
  const struct {
    const char* text;
    int k, v;
  } cases[] = {{"4,4", 4, 4}, {"8,4", 8, 4},    {"2,8", 2, 8},     {"16,16", 16, 16}, {"16", 16, 16},
               {"6", 6, 6},   {"fp16", 16, 16}, {" 4 , 3 ", 4, 3}, {"16,4", 16, 4},   {"5,fp16", 5, 16}};
  for (const auto& c : cases) {
    auto bits = parse_kv_cache_bits(c.text, "--cache-bits");
    ASSERT_TRUE(bits.ok()) << c.text << ": " << bits.status();
    EXPECT_EQ(bits->k, c.k) << c.text;
    EXPECT_EQ(bits->v, c.v) << c.text;
  }
  EXPECT_EQ(kv_cache_bits_name({8, 4}), "8,4");
  EXPECT_FALSE(KvCacheBits{}.quantized());
  EXPECT_TRUE((KvCacheBits{16, 4}.quantized()));
}

TEST(KvCacheBits, RefusesBadValuesNamingTheFlag) {
  for (const char* bad : {"", "1", "9", "0", "1,4", "4,9", "4,4,4", "4,", ",4", "fp8", "-4", "32", "4.5", "15"}) {
    auto bits = parse_kv_cache_bits(bad, "--cache-bits");
    ASSERT_FALSE(bits.ok()) << "\"" << bad << "\" was accepted";
    EXPECT_EQ(bits.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(bits.status().message());
    EXPECT_NE(message.find("--cache-bits"), std::string::npos) << message;
    EXPECT_NE(message.find("2..8"), std::string::npos) << message;
  }
  EXPECT_FALSE(validate_kv_cache_bits({4, 1}, "x").ok());
  EXPECT_TRUE(validate_kv_cache_bits({2, 16}, "x").ok());
}

// Per token of one layer, K or V of token_dim elements: token_dim * element bytes at 16;
// token_dim / 32 groups of (bits words of 4 bytes + one 2-byte scale) when quantized.
TEST(KvCacheBits, TokenBytesHandComputed) {
  EXPECT_EQ(kv_token_bytes(256, 16, 2), 512u);     // 256 fp16
  EXPECT_EQ(kv_token_bytes(256, 16, 4), 1024u);    // 256 fp32 (CPU)
  EXPECT_EQ(kv_token_bytes(256, 4, 2), 8u * 18u);  // 8 groups x (4 words + scale)
  EXPECT_EQ(kv_token_bytes(256, 8, 4), 8u * 34u);  // the element size does not matter quantized
  EXPECT_EQ(kv_token_bytes(1024, 2, 2), 32u * 10u);
  EXPECT_EQ(kv_token_bytes(96, 3, 2), 3u * 14u);
}

KvCacheShape shape_of(std::vector<int64_t> heads, int64_t head_dim, int k, int v) {
  KvCacheShape s;
  s.layer_kv_heads = std::move(heads);
  s.head_dim = head_dim;
  s.num_pages = 3;
  s.page_size = 16;
  s.k_bits = k;
  s.v_bits = v;
  return s;
}

void expect_tensor(const Tensor& t, DType dtype, const Shape& shape, const char* what) {
  ASSERT_TRUE(t.defined()) << what;
  EXPECT_EQ(t.dtype(), dtype) << what;
  EXPECT_EQ(t.shape(), shape) << what << ": " << shape_string(t.shape());
}

TEST(KvCache, AllocatesWordsAndScalesAtQuantizedWidths) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  // Layer 0 holds 3 KV heads of 32 (96 elements = 3 groups), layer 1 none (a layer split).
  KvCacheShape s = shape_of({3, 0}, 32, 8, 3);
  s.window = 24;
  auto cache = KvCache::create(s, *be);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const PagedKv& l0 = (*cache)->layer(0);
  EXPECT_EQ(l0.k_bits, 8);
  EXPECT_EQ(l0.v_bits, 3);
  EXPECT_EQ(l0.kv_heads, 3);
  EXPECT_EQ(l0.head_dim, 32);
  EXPECT_EQ(l0.page_size, 16);
  EXPECT_EQ(l0.window, 24);
  EXPECT_FALSE(l0.k_pages.defined());
  EXPECT_FALSE(l0.v_pages.defined());
  expect_tensor(l0.k_words, DType::kI32, {3, 16, 3 * 8}, "k words");
  expect_tensor(l0.k_scales, DType::kF16, {3, 16, 3}, "k scales");
  expect_tensor(l0.v_words, DType::kI32, {3, 16, 3 * 3}, "v words");
  expect_tensor(l0.v_scales, DType::kF16, {3, 16, 3}, "v scales");
  EXPECT_EQ((*cache)->layer(1).kv_heads, 0);
  // 48 tokens x 3 groups x ((8 + 3) words x 4 + 2 scales x 2) bytes.
  EXPECT_EQ((*cache)->bytes(), 48u * 3u * (11u * 4u + 4u));
  EXPECT_EQ(KvCache::bytes_for(s, 4), (*cache)->bytes());
}

TEST(KvCache, MixesFullPrecisionAndQuantizedParts) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const KvCacheShape s = shape_of({2}, 64, 16, 4);
  auto cache = KvCache::create(s, *be);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const PagedKv& l0 = (*cache)->layer(0);
  expect_tensor(l0.k_pages, be->kv_dtype(), {3, 16, 2, 64}, "k pages");
  EXPECT_FALSE(l0.k_words.defined());
  expect_tensor(l0.v_words, DType::kI32, {3, 16, 4 * 4}, "v words");
  expect_tensor(l0.v_scales, DType::kF16, {3, 16, 4}, "v scales");
  EXPECT_EQ(l0.window, 0);
  const uint64_t elem = dtype_size(be->kv_dtype());
  EXPECT_EQ((*cache)->bytes(), 48u * (128u * elem + 4u * 18u));
}

TEST(KvCache, FullPrecisionBytesUnchanged) {
  const KvCacheShape s = shape_of({4, 4, 2}, 64, 16, 16);
  EXPECT_EQ(KvCache::bytes_for(s, 2), 2u * 10u * 64u * 48u * 2u);
  // The same cache at 4,4: 10 heads x 2 groups x 18 bytes, twice, per token.
  EXPECT_EQ(KvCache::bytes_for(shape_of({4, 4, 2}, 64, 4, 4), 2), 2u * 10u * 2u * 18u * 48u);
}

TEST(KvCache, RefusesQuantizedVectorsNotMultipleOf32) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  auto bad = KvCache::create(shape_of({1}, 48, 4, 16), *be);  // 48 elements per token
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("multiple of 32"), std::string::npos) << bad.status();
  EXPECT_TRUE(KvCache::create(shape_of({1}, 48, 16, 16), *be).ok());  // full precision: any size
  EXPECT_TRUE(KvCache::create(shape_of({2}, 48, 4, 4), *be).ok());    // 96 = 3 groups
  auto width = KvCache::create(shape_of({2}, 64, 4, 9), *be);
  ASSERT_FALSE(width.ok());
  EXPECT_NE(std::string(width.status().message()).find("4,9"), std::string::npos) << width.status();
}

}  // namespace
}  // namespace exl3
