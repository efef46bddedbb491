// Quantized KV cache (exl3-format.md §9) on the CPU: the reference group quantizer's round-trip
// error per width against §9's measured figures, its bit-plane packing on hand-checked groups, the
// CPU backend's row quantizer bit-equal to the reference, attention over quantized caches equal to
// attention over a full-precision cache of the dequantized values, and the CPU backend's kv_write
// and attention (quantized K and/or V at different widths, GQA, several sequences, pages crossed,
// sliding window) against the references.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "common/paged_kv_testing.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

std::vector<float> normal_fp16(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = round_to_half(dist(rng));
  return v;
}

Tensor to_tensor(const std::vector<float>& v, Shape shape) { return Tensor::from_vector(v, std::move(shape)); }

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float m = 0.0f;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// ---- Group quantizer ----------------------------------------------------------------------------

// 4096 groups of N(0,1) (fp16-rounded, as the cache sees them): relative RMS error of the round
// trip within ±15% of §9's measurements.
TEST(KvQuant, RoundTripErrorMatchesSpecPerWidth) {
  const float spec[9] = {0, 0, 0.34f, 0.18f, 0.088f, 0.046f, 0.022f, 0.011f, 0.0055f};
  constexpr int64_t kGroups = 4096;
  const std::vector<float> data = normal_fp16(kGroups * 32, 1234);
  for (int bits = 2; bits <= 8; ++bits) {
    double err = 0.0, ref = 0.0;
    uint32_t words[8];
    uint16_t scale;
    float back[32];
    for (int64_t g = 0; g < kGroups; ++g) {
      const float* v = data.data() + g * 32;
      kv_quantize_group_ref(v, bits, words, &scale);
      kv_dequantize_group_ref(words, scale, bits, back);
      for (int e = 0; e < 32; ++e) {
        err += static_cast<double>(back[e] - v[e]) * (back[e] - v[e]);
        ref += static_cast<double>(v[e]) * v[e];
      }
    }
    const double rel = std::sqrt(err / ref);
    std::printf("bits %d: relative rms error %.5f (spec %.4f)\n", bits, rel, spec[bits]);
    EXPECT_NEAR(rel, spec[bits], 0.15 * spec[bits]) << "bits " << bits;
  }
}

// A group whose WHT-domain values are known: w[0] = 1 (the maximum, so the scale is 1.0 and q[0] =
// 2^b - 1 after the clamp) and w[e] = (q[e] + 0.5 - m) / m for chosen q[e] (mid-cell, so floor is
// far from any boundary). v = H32 · w / sqrt(32) is what the cache receives.
struct KnownGroup {
  std::vector<float> v;
  std::vector<double> w_dequant;  // the dequantized WHT-domain values (w[0] lands mid-cell too)
};

KnownGroup known_group(int bits, const std::vector<uint32_t>& q) {
  const double m = static_cast<double>(1 << (bits - 1));
  std::vector<double> w(32), wd(32);
  for (int e = 0; e < 32; ++e) w[e] = wd[e] = (q[e] + 0.5 - m) / m;
  w[0] = 1.0;
  KnownGroup g;
  g.w_dequant = wd;
  g.v.resize(32);
  for (int i = 0; i < 32; ++i) {
    double s = 0.0;
    for (int e = 0; e < 32; ++e) s += (std::popcount(static_cast<unsigned>(i & e)) % 2 ? -1.0 : 1.0) * w[e];
    g.v[i] = static_cast<float>(s / std::sqrt(32.0));
  }
  return g;
}

void expect_words(int bits, const std::vector<uint32_t>& q, const std::vector<uint32_t>& want) {
  ASSERT_EQ(q[0], (1u << bits) - 1u);
  const KnownGroup g = known_group(bits, q);
  uint32_t words[8] = {};
  uint16_t scale = 0;
  kv_quantize_group_ref(g.v.data(), bits, words, &scale);
  EXPECT_EQ(scale, 0x3C00u) << "bits " << bits << ": scale 1.0 expected";
  for (int i = 0; i < bits; ++i) {
    EXPECT_EQ(words[i], want[i]) << "bits " << bits << " word " << i << std::hex << ": got 0x" << words[i] << " want 0x"
                                 << want[i];
  }
  // The inverse: v' = H32 · w' / sqrt(32) with w' the cell midpoints, to fp16 rounding.
  float back[32];
  kv_dequantize_group_ref(words, scale, bits, back);
  for (int i = 0; i < 32; ++i) {
    double s = 0.0;
    for (int e = 0; e < 32; ++e) {
      s += (std::popcount(static_cast<unsigned>(i & e)) % 2 ? -1.0 : 1.0) * g.w_dequant[e];
    }
    const double want_v = s / std::sqrt(32.0);
    EXPECT_NEAR(back[i], want_v, 1e-3 * std::max(1.0, std::abs(want_v))) << "bits " << bits << " element " << i;
  }
}

// 2 bits, one 2-bit plane: q = 3, 2, 2, ... -> fields 0b10 (0xA nibbles), element 0 in bits 0..1.
TEST(KvQuant, PackingTwoBits) {
  std::vector<uint32_t> q(32, 2);
  q[0] = 3;
  expect_words(2, q, {0xAAAAAAABu, 0xAAAAAAAAu});
}

// 3 bits = planes 2 + 1: q[0] = 7, q[e] = e % 8. Plane 2 (words 0, 1) holds q >> 1 at 2e; plane 1
// (word 2) holds q & 1 at bit e.
TEST(KvQuant, PackingThreeBits) {
  std::vector<uint32_t> q(32);
  for (int e = 0; e < 32; ++e) q[e] = e % 8;
  q[0] = 7;
  expect_words(3, q, {0xFA50FA53u, 0xFA50FA50u, 0xAAAAAAABu});
}

// 7 bits = planes 4 + 2 + 1: q[0] = 127 = 1111|11|1, q[e] = 89 = 1011|00|1. Plane 4 (words 0..3)
// holds q >> 3 in nibble e % 8 of word e / 8; plane 2 (words 4, 5) (q >> 1) & 3; plane 1 (word 6).
TEST(KvQuant, PackingSevenBits) {
  std::vector<uint32_t> q(32, 89);
  q[0] = 127;
  expect_words(7, q, {0xBBBBBBBFu, 0xBBBBBBBBu, 0xBBBBBBBBu, 0xBBBBBBBBu, 0x00000003u, 0u, 0xFFFFFFFFu});
}

// 8 bits, one 8-bit plane: q[0] = 255, q[e] = 8e; element e in byte e % 4 of word e / 4.
TEST(KvQuant, PackingEightBits) {
  std::vector<uint32_t> q(32);
  for (int e = 0; e < 32; ++e) q[e] = 8 * e;
  q[0] = 255;
  expect_words(
      8, q, {0x181008FFu, 0x38302820u, 0x58504840u, 0x78706860u, 0x98908880u, 0xB8B0A8A0u, 0xD8D0C8C0u, 0xF8F0E8E0u});
}

// 5 bits = planes 4 + 1, 6 bits = planes 4 + 2: q[e] = 0b10110 (22) / 0b101101 (45) everywhere
// but element 0.
TEST(KvQuant, PackingFiveAndSixBits) {
  std::vector<uint32_t> q5(32, 22);
  q5[0] = 31;  // 1111|1
  expect_words(5, q5, {0xBBBBBBBFu, 0xBBBBBBBBu, 0xBBBBBBBBu, 0xBBBBBBBBu, 0x00000001u});
  std::vector<uint32_t> q6(32, 45);
  q6[0] = 63;  // 1111|11; others 1011|01
  expect_words(6, q6, {0xBBBBBBBFu, 0xBBBBBBBBu, 0xBBBBBBBBu, 0xBBBBBBBBu, 0x55555557u, 0x55555555u});
}

// The CPU backend's row quantizer and dequantizer are bit-equal to the reference, every width,
// including groups of tiny, huge and zero values.
TEST(KvQuant, CpuRowQuantizerIsBitEqualToReference) {
  constexpr int64_t kGroups = 515;
  std::vector<float> row = normal_fp16(kGroups * 32, 99, 3.0f);
  for (int e = 0; e < 32; ++e) {
    row[32 + e] = 0.0f;
    row[64 + e] = round_to_half(1e-4f * (e - 16));
    row[96 + e] = round_to_half(2000.0f * std::sin(static_cast<float>(e)));
  }
  for (int bits = 2; bits <= 8; ++bits) {
    std::vector<uint32_t> words(kGroups * bits), ref_words(kGroups * bits);
    std::vector<uint16_t> scales(kGroups), ref_scales(kGroups);
    kv_quantize_row_cpu(row.data(), kGroups, bits, words.data(), scales.data());
    std::vector<float> back(kGroups * 32), ref_back(kGroups * 32);
    kv_dequantize_cpu(words.data(), scales.data(), bits, kGroups, back.data());
    int64_t word_diffs = 0, value_diffs = 0;
    for (int64_t g = 0; g < kGroups; ++g) {
      kv_quantize_group_ref(row.data() + g * 32, bits, ref_words.data() + g * bits, &ref_scales[g]);
      kv_dequantize_group_ref(ref_words.data() + g * bits, ref_scales[g], bits, ref_back.data() + g * 32);
      EXPECT_EQ(scales[g], ref_scales[g]) << "bits " << bits << " group " << g;
    }
    for (size_t i = 0; i < words.size(); ++i) word_diffs += words[i] != ref_words[i];
    for (size_t i = 0; i < back.size(); ++i) value_diffs += back[i] != ref_back[i];
    EXPECT_EQ(word_diffs, 0) << "bits " << bits;
    EXPECT_EQ(value_diffs, 0) << "bits " << bits;
  }
}

// ---- Caches -----------------------------------------------------------------------------------

using testing::CacheSpec;
using testing::host_paged_kv;

// Rows [n, kv_heads · head_dim] as the quantized cache returns them.
Tensor round_trip(const Tensor& x, int bits) {
  if (bits == 16) return x.clone();
  Tensor out = x.clone();
  uint32_t words[8];
  uint16_t scale;
  for (int64_t g = 0; g < x.numel() / 32; ++g) {
    kv_quantize_group_ref(x.data<float>() + g * 32, bits, words, &scale);
    kv_dequantize_group_ref(words, scale, bits, out.mutable_data<float>() + g * 32);
  }
  return out;
}

// kv_write_ref + attention_ref over a quantized cache equal attention_ref over a full-precision
// cache holding the round-tripped rows: quantized K only, V only, both at different widths; GQA,
// pages crossed, a window smaller than the sequence.
TEST(KvQuant, QuantizedAttentionEqualsAttentionOverDequantizedRows) {
  const int64_t heads = 6, kv_heads = 2, head_dim = 64, page_size = 5, tokens = 23;
  const std::vector<int32_t> pages = {3, 0, 6, 1, 5};
  std::vector<int32_t> positions(tokens);
  std::iota(positions.begin(), positions.end(), 0);
  const Tensor k = to_tensor(normal_fp16(tokens * kv_heads * head_dim, 11), {tokens, kv_heads, head_dim});
  const Tensor v = to_tensor(normal_fp16(tokens * kv_heads * head_dim, 12), {tokens, kv_heads, head_dim});
  const Tensor q = to_tensor(normal_fp16(7 * heads * head_dim, 13), {7, heads, head_dim});
  const std::vector<int32_t> q_pos = {0, 4, 5, 11, 16, 21, 22};
  for (const auto& [kb, vb, window] :
       {std::array<int64_t, 3>{4, 16, 0}, std::array<int64_t, 3>{16, 3, 0}, std::array<int64_t, 3>{5, 3, 0},
        std::array<int64_t, 3>{8, 2, 9}, std::array<int64_t, 3>{16, 16, 6}}) {
    PagedKv quant = host_paged_kv({7, page_size, kv_heads, head_dim, static_cast<int>(kb), static_cast<int>(vb), window});
    PagedKv full = host_paged_kv({7, page_size, kv_heads, head_dim, 16, 16, window});
    kv_write_ref(quant, pages, positions, k, v);
    kv_write_ref(full, pages, positions, round_trip(k, static_cast<int>(kb)), round_trip(v, static_cast<int>(vb)));
    const float diff = max_abs_diff(attention_ref(q, quant, pages, q_pos), attention_ref(q, full, pages, q_pos));
    EXPECT_LE(diff, 1e-6f) << "k_bits " << kb << " v_bits " << vb << " window " << window;
  }
}

// The window by hand: one key per position, the query sees only the last `window` positions.
TEST(KvQuant, WindowRestrictsKeysByHand) {
  PagedKv c = host_paged_kv({3, 2, 1, 2, 16, 16, 2});
  const std::vector<int32_t> pages = {2, 0, 1};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  const Tensor k = Tensor::zeros(DType::kF32, {5, 1, 2});  // equal scores: a plain mean
  const Tensor v = Tensor::from_vector<float>({1, 0, 2, 0, 4, 0, 8, 0, 16, 0}, {5, 1, 2});
  kv_write_ref(c, pages, pos, k, v);
  const Tensor q = Tensor::from_vector<float>({1, 1, 1, 1}, {2, 1, 2});
  const std::vector<int32_t> q_pos = {0, 4};
  const Tensor o = attention_ref(q, c, pages, q_pos);
  EXPECT_FLOAT_EQ(o.data<float>()[0], 1.0f);   // position 0: only itself
  EXPECT_FLOAT_EQ(o.data<float>()[2], 12.0f);  // position 4, window 2: (8 + 16) / 2
}

// ---- CPU backend ----------------------------------------------------------------------------

struct Seq {
  int32_t context, fresh;
};

// The CPU backend's kv_write and attention over a batch of sequences against kv_write_ref (bit-equal
// words, scales and pages) and attention_ref (within BLAS summation order).
void check_backend(const CacheSpec& spec, int64_t heads, const std::vector<Seq>& seqs, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "k_bits " << spec.k_bits << " v_bits " << spec.v_bits << " window " << spec.window
                                  << " kv_heads " << spec.kv_heads << " head_dim " << spec.head_dim);
  std::unique_ptr<Backend> b = make_cpu_backend();
  const int64_t num_seqs = static_cast<int64_t>(seqs.size());
  int64_t max_pages = 0;
  for (const Seq& s : seqs)
    max_pages = std::max<int64_t>(max_pages, (s.context + s.fresh + spec.page_size - 1) / spec.page_size);
  ASSERT_LE(num_seqs * max_pages, spec.num_pages);
  // Pages handed out backwards and interleaved between sequences.
  std::vector<std::vector<int32_t>> tables(num_seqs);
  std::vector<int32_t> page_table(num_seqs * max_pages, 0);
  int32_t next = static_cast<int32_t>(spec.num_pages) - 1;
  for (int64_t p = 0; p < max_pages; ++p) {
    for (int64_t s = 0; s < num_seqs; ++s) {
      tables[s].push_back(next);
      page_table[s * max_pages + p] = next--;
    }
  }
  PagedKv ref = host_paged_kv(spec);
  PagedKv dev = host_paged_kv(spec);
  const int64_t row = spec.kv_heads * spec.head_dim;
  uint32_t data_seed = seed;

  auto run_step = [&](bool history, Tensor* q_out, std::vector<int32_t>* pos_out, std::vector<int32_t>* seq_out) {
    std::vector<int32_t> positions, token_seq;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int32_t begin = history ? 0 : seqs[s].context;
      const int32_t end = history ? seqs[s].context : seqs[s].context + seqs[s].fresh;
      for (int32_t p = begin; p < end; ++p) {
        positions.push_back(p);
        token_seq.push_back(static_cast<int32_t>(s));
      }
    }
    const int64_t n = static_cast<int64_t>(positions.size());
    const Tensor k = to_tensor(normal_fp16(n * row, ++data_seed), {n, spec.kv_heads, spec.head_dim});
    const Tensor v = to_tensor(normal_fp16(n * row, ++data_seed), {n, spec.kv_heads, spec.head_dim});
    for (int64_t t = 0; t < n;) {
      int64_t count = 1;
      while (t + count < n && token_seq[t + count] == token_seq[t]) ++count;
      kv_write_ref(ref, tables[token_seq[t]], std::span<const int32_t>(positions.data() + t, count), k.rows(t, count),
                   v.rows(t, count));
      t += count;
    }
    StepMeta meta;
    meta.positions = Tensor::from_vector(positions, {n});
    meta.token_seq = Tensor::from_vector(token_seq, {n});
    meta.page_table = Tensor::from_vector(page_table, {num_seqs, max_pages});
    meta.num_tokens = n;
    meta.num_seqs = num_seqs;
    meta.max_pages = max_pages;
    meta.max_position = n > 0 ? *std::max_element(positions.begin(), positions.end()) : 0;
    if (n > 0) b->kv_write(dev, k, v, meta);
    if (q_out != nullptr) {
      *q_out = to_tensor(normal_fp16(n * heads * spec.head_dim, ++data_seed), {n, heads, spec.head_dim});
      Tensor out = Tensor::zeros(DType::kF32, q_out->shape());
      b->attention(*q_out, dev, meta, out);
      *pos_out = positions;
      *seq_out = token_seq;
      // Reference per sequence.
      Tensor want = Tensor::zeros(DType::kF32, q_out->shape());
      const int64_t q_row = heads * spec.head_dim;
      for (int64_t t = 0; t < n;) {
        int64_t count = 1;
        while (t + count < n && token_seq[t + count] == token_seq[t]) ++count;
        const Tensor o = attention_ref(q_out->rows(t, count), ref, tables[token_seq[t]],
                                       std::span<const int32_t>(positions.data() + t, count));
        std::copy_n(o.data<float>(), o.numel(), want.mutable_data<float>() + t * q_row);
        t += count;
      }
      const float diff = max_abs_diff(out, want);
      EXPECT_LT(diff, 2e-5f) << "attention of " << n << " tokens";
    }
  };
  run_step(true, nullptr, nullptr, nullptr);
  Tensor q;
  std::vector<int32_t> pos, seq;
  run_step(false, &q, &pos, &seq);

  auto expect_same = [](const Tensor& got, const Tensor& want, const char* what) {
    if (!want.defined()) return;
    ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
    const auto* g = static_cast<const uint8_t*>(got.raw());
    const auto* w = static_cast<const uint8_t*>(want.raw());
    int64_t diffs = 0;
    for (uint64_t i = 0; i < got.nbytes(); ++i) diffs += g[i] != w[i];
    EXPECT_EQ(diffs, 0) << what << ": bytes differing from kv_write_ref";
  };
  expect_same(dev.k_pages, ref.k_pages, "k_pages");
  expect_same(dev.v_pages, ref.v_pages, "v_pages");
  expect_same(dev.k_words, ref.k_words, "k_words");
  expect_same(dev.k_scales, ref.k_scales, "k_scales");
  expect_same(dev.v_words, ref.v_words, "v_words");
  expect_same(dev.v_scales, ref.v_scales, "v_scales");
}

// Chunked prefill and decode mixed: 3 sequences, positions crossing pages of 7, GQA 10 / 2 with
// head_dim 48 (groups of 32 straddle the heads), K and V at different widths.
TEST(KvQuant, CpuBackendMatchesReferenceMixedWidths) {
  const std::vector<Seq> seqs = {{9, 13}, {30, 1}, {0, 5}};
  check_backend({20, 7, 2, 48, 5, 3, 0}, 10, seqs, 1);
  check_backend({20, 7, 2, 48, 16, 4, 0}, 10, seqs, 2);
  check_backend({20, 7, 2, 48, 2, 16, 0}, 10, seqs, 3);
  check_backend({20, 7, 2, 48, 8, 6, 0}, 10, seqs, 4);
}

// A window smaller than every sequence (and than a page), full-precision and quantized.
TEST(KvQuant, CpuBackendMatchesReferenceWithWindow) {
  const std::vector<Seq> seqs = {{17, 12}, {40, 1}, {3, 9}};
  check_backend({24, 8, 3, 32, 16, 16, 5}, 9, seqs, 5);
  check_backend({24, 8, 3, 32, 4, 7, 11}, 9, seqs, 6);
  check_backend({24, 8, 3, 32, 3, 16, 1}, 3, seqs, 7);
}

}  // namespace
}  // namespace exl3
