// GPU test of the quantized KV cache (exl3-format.md §9) and the sliding window on the CUDA backend:
// kv_write's words and scales bit-equal to kv_write_ref on the same fp16 inputs (every width, K and
// V at different widths, groups of zeros, tiny and large values), attention over quantized pages
// and attention with a window (F16 pages too: prefill, decode, split decode, chunked prefill) against
// attention_ref within the attention budget of backend_ops_gpu_test (long contexts too: decode split
// over up to 64 blocks of keys at batch 1 and 16, with a window, K-only, V-only, GQA group 4 of 32
// heads, 48 heads per KV head, prefill next to split decode; a lone token, whose decode blocks hold
// helper warps), rope_kv_write on a quantized cache equal to rope + kv_write, a quantized step
// replayed from a CUDA graph equal to the same step run directly, and split decode steps replayed
// from one graph captured for a bucket (split plan of the bucket's last position) matching the
// reference at each step.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/backend_tensors.h"
#include "common/paged_kv_testing.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/attention_split.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

// Attention budget of backend_ops_gpu_test (kAttention): fp16 output rounding plus the kernels' own
// fp32 summation order (the quantized path keeps probabilities in fp32; the F16 path rounds them).
constexpr double kAttentionNmse = 2e-6;
constexpr double kAttentionMaxAbs = 5e-3;

// ---- Host and device helpers ---------------------------------------------------------------------

std::vector<float> normal_fp16(int64_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = round_to_half(dist(rng));
  return v;
}

Tensor f16_host(const Tensor& f32) {
  Tensor out = Tensor::zeros(DType::kF16, f32.shape());
  auto* bits = static_cast<uint16_t*>(out.mutable_raw());
  for (int64_t i = 0; i < f32.numel(); ++i) bits[i] = float_to_half_bits(f32.data<float>()[i]);
  return out;
}

using testing::device_zeros;
using testing::to_device;
using testing::to_host;

Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

using testing::CacheSpec;

// The reference cache (F32 pages at 16 bits) or, with a backend, the device cache (F16 pages).
PagedKv make_cache(const CacheSpec& s, Backend* b) {
  if (b == nullptr) return testing::host_paged_kv(s);
  return testing::make_paged_kv(s, DType::kF16,
                                [&](DType dtype, const Shape& shape) { return device_zeros(*b, dtype, shape); });
}

// q of one group from its words (for diagnostics).
uint32_t group_q(const uint32_t* words, int bits, int e) {
  uint32_t q = 0;
  for (int pw = 8; pw >= 1; pw /= 2) {
    if ((bits & pw) == 0) continue;
    const int off = e * pw;
    q |= ((words[(bits & ~(2 * pw - 1)) + off / 32] >> (off % 32)) & ((1u << pw) - 1u)) << (bits & (pw - 1));
  }
  return q;
}

// Words and scales of one quantized side, device against reference: every word and scale equal.
// On failure prints the first differing groups with their q values side by side.
void expect_side_equal(Backend& b, const Tensor& dev_words, const Tensor& dev_scales, const Tensor& ref_words,
                       const Tensor& ref_scales, int bits, const std::string& what) {
  const Tensor words = to_host(b, dev_words), scales = to_host(b, dev_scales);
  const auto* gw = static_cast<const uint32_t*>(words.raw());
  const auto* rw = static_cast<const uint32_t*>(ref_words.raw());
  const auto* gs = static_cast<const uint16_t*>(scales.raw());
  const auto* rs = static_cast<const uint16_t*>(ref_scales.raw());
  const int64_t groups = ref_scales.numel();
  int64_t bad_groups = 0, bad_scales = 0, q_diffs = 0, max_q_diff = 0;
  for (int64_t g = 0; g < groups; ++g) {
    bad_scales += gs[g] != rs[g];
    bool bad = false;
    for (int i = 0; i < bits; ++i) bad |= gw[g * bits + i] != rw[g * bits + i];
    if (!bad) continue;
    for (int e = 0; e < 32; ++e) {
      const int64_t d = std::llabs(static_cast<int64_t>(group_q(gw + g * bits, bits, e)) -
                                   static_cast<int64_t>(group_q(rw + g * bits, bits, e)));
      q_diffs += d != 0;
      max_q_diff = std::max(max_q_diff, d);
    }
    if (bad_groups++ < 4) {
      std::printf("  %s group %lld: scale got 0x%04x want 0x%04x; q got/want:", what.c_str(), static_cast<long long>(g),
                  gs[g], rs[g]);
      for (int e = 0; e < 32; ++e)
        std::printf(" %u/%u", group_q(gw + g * bits, bits, e), group_q(rw + g * bits, bits, e));
      std::printf("\n");
    }
  }
  std::printf("%-34s %lld groups at %d bits: %lld differ (%lld q values, max |dq| %lld), %lld scales differ\n",
              what.c_str(), static_cast<long long>(groups), bits, static_cast<long long>(bad_groups),
              static_cast<long long>(q_diffs), static_cast<long long>(max_q_diff), static_cast<long long>(bad_scales));
  EXPECT_EQ(bad_groups, 0) << what;
  EXPECT_EQ(bad_scales, 0) << what;
}

void expect_pages_equal(Backend& b, const Tensor& dev_pages, const Tensor& ref_pages, const std::string& what) {
  const Tensor got = to_host(b, dev_pages).to_f32();
  int64_t diffs = 0;
  for (int64_t i = 0; i < got.numel(); ++i) diffs += got.data<float>()[i] != ref_pages.data<float>()[i];
  EXPECT_EQ(diffs, 0) << what << ": F16 pages differ from kv_write_ref";
}

void expect_attention_close(const Tensor& got, const Tensor& want, const std::string& what) {
  double err2 = 0.0, ref2 = 0.0, max_abs = 0.0;
  int64_t worst = -1, nonfinite = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if (!std::isfinite(g)) {
      ++nonfinite;
      continue;
    }
    const double d = static_cast<double>(g) - w;
    err2 += d * d;
    ref2 += static_cast<double>(w) * w;
    if (std::fabs(d) > max_abs || worst < 0) {
      max_abs = std::fabs(d);
      worst = i;
    }
  }
  const double nmse = ref2 > 0 ? err2 / ref2 : err2;
  const bool ok = nonfinite == 0 && nmse <= kAttentionNmse && max_abs <= kAttentionMaxAbs;
  std::printf("%-34s attention nmse %.3g (budget %.3g) max_abs %.3g at %lld (budget %.3g)%s\n", what.c_str(), nmse,
              kAttentionNmse, max_abs, static_cast<long long>(worst), kAttentionMaxAbs, ok ? "" : "  FAIL");
  if (!ok) {
    int printed = 0;
    for (int64_t i = 0; i < got.numel() && printed < 8; ++i) {
      const float g = got.data<float>()[i], w = want.data<float>()[i];
      if (std::isfinite(g) && std::fabs(g - w) <= kAttentionMaxAbs) continue;
      std::printf("    [%lld] got %.7g want %.7g\n", static_cast<long long>(i), g, w);
      ++printed;
    }
  }
  EXPECT_TRUE(ok) << what << ": nmse " << nmse << " max_abs " << max_abs << ", " << nonfinite << " non-finite";
}

// ---- Batched steps -------------------------------------------------------------------------------

struct Seq {
  int32_t context, fresh;  // positions already cached; tokens of this step after them
};

struct Case {
  std::string name;
  int64_t heads, kv_heads, head_dim, page_size;
  int k_bits, v_bits;
  int64_t window;
  std::vector<Seq> seqs;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Sequences over scattered pages: host tables and the padded device page table.
struct Layout {
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> page_table;
  int64_t num_pages = 0, max_pages = 0;
};

Layout make_layout(const std::vector<Seq>& seqs, int64_t page_size, std::mt19937& rng) {
  Layout l;
  std::vector<int64_t> needed;
  int64_t total = 0;
  for (const Seq& s : seqs) {
    needed.push_back((s.context + s.fresh + page_size - 1) / page_size);
    total += needed.back();
    l.max_pages = std::max(l.max_pages, needed.back());
  }
  l.num_pages = total + 3;
  std::vector<int32_t> pool(static_cast<size_t>(l.num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  l.tables.resize(seqs.size());
  l.page_table.assign(seqs.size() * l.max_pages, 0);
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p = 0; p < needed[s]; ++p) {
      l.tables[s].push_back(pool[next++]);
      l.page_table[s * l.max_pages + p] = l.tables[s].back();
    }
  }
  return l;
}

struct Step {
  std::vector<int32_t> positions, token_seq;
};

Step make_step(const std::vector<Seq>& seqs, bool history) {
  Step st;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int32_t begin = history ? 0 : seqs[s].context;
    const int32_t end = history ? seqs[s].context : seqs[s].context + seqs[s].fresh;
    for (int32_t p = begin; p < end; ++p) {
      st.positions.push_back(p);
      st.token_seq.push_back(static_cast<int32_t>(s));
    }
  }
  return st;
}

StepMeta device_meta(Backend& b, const Step& st, const Layout& l) {
  StepMeta m;
  const int64_t n = static_cast<int64_t>(st.positions.size());
  const int64_t num_seqs = static_cast<int64_t>(l.tables.size());
  m.tokens = to_device(b, i32(std::vector<int32_t>(static_cast<size_t>(n), 0)));
  m.positions = to_device(b, i32(st.positions));
  m.token_seq = to_device(b, i32(st.token_seq));
  m.page_table = to_device(b, Tensor::from_vector(l.page_table, {num_seqs, l.max_pages}));
  m.logit_rows = to_device(b, i32(std::vector<int32_t>(static_cast<size_t>(num_seqs), 0)));
  m.num_tokens = n;
  m.num_seqs = num_seqs;
  m.max_pages = l.max_pages;
  m.num_logit_rows = num_seqs;
  m.max_position = n > 0 ? *std::max_element(st.positions.begin(), st.positions.end()) : 0;
  return m;
}

// Runs of same-sequence tokens of a step: (first token, count).
std::vector<std::pair<int64_t, int64_t>> runs_of(const Step& st) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  const int64_t n = static_cast<int64_t>(st.positions.size());
  for (int64_t t = 0; t < n;) {
    int64_t count = 1;
    while (t + count < n && st.token_seq[t + count] == st.token_seq[t]) ++count;
    runs.push_back({t, count});
    t += count;
  }
  return runs;
}

// kv_write of a step on both caches; k and v fp16-rounded N(0,1), some tokens' keys scaled.
void write_step(Backend& b, const Step& st, const Layout& l, const CacheSpec& spec, PagedKv& ref, PagedKv& dev,
                std::mt19937& rng) {
  const int64_t n = static_cast<int64_t>(st.positions.size());
  if (n == 0) return;
  const Shape shape{n, spec.kv_heads, spec.head_dim};
  Tensor k = Tensor::from_vector(normal_fp16(n * spec.kv_heads * spec.head_dim, rng), shape);
  Tensor v = Tensor::from_vector(normal_fp16(n * spec.kv_heads * spec.head_dim, rng), shape);
  for (const auto& [t, count] : runs_of(st)) {
    kv_write_ref(ref, l.tables[st.token_seq[t]], std::span<const int32_t>(st.positions.data() + t, count),
                 k.rows(t, count), v.rows(t, count));
  }
  b.kv_write(dev, to_device(b, f16_host(k)), to_device(b, f16_host(v)), device_meta(b, st, l));
}

void run_case(Backend& b, const Case& c) {
  uint32_t seed = 2166136261u;  // FNV-1a of the case name
  for (char ch : c.name) seed = (seed ^ static_cast<uint8_t>(ch)) * 16777619u;
  std::mt19937 rng(seed);
  const Layout l = make_layout(c.seqs, c.page_size, rng);
  const CacheSpec spec{l.num_pages, c.page_size, c.kv_heads, c.head_dim, c.k_bits, c.v_bits, c.window};
  PagedKv ref = make_cache(spec, nullptr);
  PagedKv dev = make_cache(spec, &b);
  write_step(b, make_step(c.seqs, true), l, spec, ref, dev, rng);
  const Step st = make_step(c.seqs, false);
  write_step(b, st, l, spec, ref, dev, rng);

  const int64_t n = static_cast<int64_t>(st.positions.size());
  const Tensor q = Tensor::from_vector(normal_fp16(n * c.heads * c.head_dim, rng), {n, c.heads, c.head_dim});
  Tensor want = Tensor::zeros(DType::kF32, q.shape());
  for (const auto& [t, count] : runs_of(st)) {
    const Tensor o = attention_ref(q.rows(t, count), ref, l.tables[st.token_seq[t]],
                                   std::span<const int32_t>(st.positions.data() + t, count));
    std::copy_n(o.data<float>(), o.numel(), want.mutable_data<float>() + t * c.heads * c.head_dim);
  }
  Tensor out = device_zeros(b, DType::kF16, q.shape());
  b.attention(to_device(b, f16_host(q)), dev, device_meta(b, st, l), out);
  ASSERT_TRUE(b.synchronize().ok());

  if (c.k_bits == 16) {
    expect_pages_equal(b, dev.k_pages, ref.k_pages, c.name + " k_pages");
  } else {
    expect_side_equal(b, dev.k_words, dev.k_scales, ref.k_words, ref.k_scales, c.k_bits, c.name + " keys");
  }
  if (c.v_bits == 16) {
    expect_pages_equal(b, dev.v_pages, ref.v_pages, c.name + " v_pages");
  } else {
    expect_side_equal(b, dev.v_words, dev.v_scales, ref.v_words, ref.v_scales, c.v_bits, c.name + " values");
  }
  expect_attention_close(to_host(b, out).to_f32(), want, c.name);
}

std::vector<Case> cases() {
  std::vector<Case> list = {
      // Quantized, full causal: prefill, decode, chunked prefill mixed with decode.
      {"q44_prefill_gqa", 8, 2, 128, 16, 4, 4, 0, {{0, 17}, {0, 1}, {0, 40}}},
      {"q43_chunked_mixed_hd64", 12, 4, 64, 16, 4, 3, 0, {{20, 17}, {0, 3}, {300, 1}, {127, 2}}},
      {"q88_decode", 32, 8, 128, 16, 8, 8, 0, {{100, 1}, {1, 1}, {1000, 1}, {16, 1}, {33, 1}}},
      {"q22_decode_long_mha_hd64", 4, 4, 64, 32, 2, 2, 0, {{2000, 1}, {7, 1}}},
      {"q65_mqa_48heads", 48, 1, 128, 16, 6, 5, 0, {{50, 3}, {9, 1}}},
      {"q7_k_only", 8, 2, 128, 16, 7, 16, 0, {{30, 5}, {64, 1}}},
      {"q3_v_only", 8, 2, 64, 16, 16, 3, 0, {{30, 5}, {64, 1}}},
      // Quantized with a window smaller than the sequences.
      {"q44_window_prefill", 8, 2, 128, 16, 4, 4, 24, {{0, 70}, {10, 5}}},
      {"q53_window_decode", 16, 4, 64, 16, 5, 3, 37, {{500, 1}, {20, 1}, {36, 1}}},
      // F16 pages with a window: prefill, decode with split-K over a long context, chunked mixed.
      {"f16_window_prefill", 8, 2, 128, 16, 16, 16, 24, {{0, 70}, {10, 5}}},
      {"f16_window_decode_split", 8, 2, 64, 16, 16, 16, 1000, {{4000, 1}}},
      {"f16_window_decode_small", 32, 8, 128, 16, 16, 16, 5, {{100, 1}, {1, 1}, {1000, 1}}},
      {"f16_window_chunked_mixed", 12, 4, 64, 16, 16, 16, 33, {{20, 17}, {0, 3}, {300, 1}, {127, 2}}},
  };
  // Long contexts: decode split over many blocks of keys (batch 1: up to 64 splits of 32 keys;
  // batch 16: 8 splits), GQA group 4 with 32 heads as Llama 3 8B; a window cutting through the
  // splits; K-only and V-only quantization; more than 16 heads per KV head; prefill and split
  // decode in one batch.
  std::vector<Seq> batch16;
  for (int i = 0; i < 16; ++i) batch16.push_back({i % 5 == 4 ? 37 + 11 * i : 1999 - 61 * i, 1});
  const std::vector<Case> long_cases = {
      {"q44_decode_long_gqa4_b1", 32, 8, 128, 16, 4, 4, 0, {{2047, 1}}},
      // One token: decode blocks with helper warps (kSingleTokenDecodeWarps), split, head_dim 64,
      // and in one split (no merge).
      {"q53_decode_long_hd64_b1", 16, 4, 64, 16, 5, 3, 0, {{1700, 1}}},
      {"q44_decode_short_b1", 32, 8, 128, 16, 4, 4, 0, {{20, 1}}},
      {"q44_decode_long_gqa4_b16", 32, 8, 128, 16, 4, 4, 0, batch16},
      {"q35_decode_long_hd64_b3", 32, 8, 64, 32, 3, 5, 0, {{1500, 1}, {31, 1}, {2200, 1}}},
      {"q44_window_decode_splits", 32, 8, 128, 16, 4, 4, 300, {{3000, 1}, {700, 1}, {10, 1}, {299, 1}}},
      {"q26_window_decode_splits_b16", 32, 8, 128, 16, 2, 6, 1000, batch16},
      {"q4_k_only_decode_splits", 32, 8, 128, 16, 4, 16, 0, {{1500, 1}, {64, 1}}},
      {"q3_v_only_decode_splits", 32, 8, 64, 16, 16, 3, 0, {{1500, 1}, {40, 1}}},
      {"q8_k_only_window_splits", 16, 4, 128, 16, 8, 16, 513, {{2000, 1}}},
      {"q44_mqa_48heads_decode_long", 48, 1, 128, 16, 4, 4, 0, {{1200, 1}, {5, 1}}},
      {"q44_prefill_long_gqa4", 32, 8, 128, 16, 4, 4, 0, {{0, 150}}},
      {"q44_chunked_with_split_decode", 32, 8, 128, 16, 4, 4, 0, {{1000, 40}, {1800, 1}, {500, 1}, {0, 23}}},
      {"q53_window_chunked_split_decode", 32, 8, 64, 16, 5, 3, 200, {{900, 33}, {1700, 1}, {150, 1}}},
      // Pages of 64 and 256 keys (the engine's): a block of 32 keys from one page takes one
      // page-table lookup; a window starting between multiples of 32 makes blocks that straddle
      // two pages next to blocks that do not.
      {"q44_decode_long_p256", 32, 8, 128, 256, 4, 4, 0, {{2047, 1}, {600, 1}, {255, 1}}},
      {"q53_chunked_split_decode_p256", 32, 8, 64, 256, 5, 3, 0, {{900, 33}, {1700, 1}, {0, 40}}},
      {"q44_window_decode_p64", 32, 8, 128, 64, 4, 4, 300, {{3000, 1}, {700, 1}, {10, 1}, {299, 1}}},
      {"f16_window_decode_p64", 32, 8, 128, 64, 16, 16, 300, {{3000, 1}, {700, 1}, {299, 1}}},
      {"f16_window_chunked_p256", 12, 4, 64, 256, 16, 16, 77, {{500, 40}, {1300, 1}, {3, 2}}},
  };
  list.insert(list.end(), long_cases.begin(), long_cases.end());
  for (int bits = 2; bits <= 8; ++bits) {
    const int other = bits == 8 ? 2 : bits + 1;
    list.push_back({absl::StrCat("width_k", bits, "_v", other), 6, 3, 64, 16, bits, other, 0, {{40, 9}, {3, 1}}});
  }
  return list;
}

// One CUDA backend for every test, destroyed (by the suites' teardown) before the runtime shuts down.
std::unique_ptr<Backend>& backend_slot() {
  static std::unique_ptr<Backend> backend;
  return backend;
}

Backend* backend() {
  std::unique_ptr<Backend>& slot = backend_slot();
  if (slot == nullptr) {
    absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(CudaBackendOptions{});
    EXL3_CHECK_OK(made.status());
    slot = std::move(*made);
    std::printf("backend: %s\n", slot->description().c_str());
    EXL3_CHECK_OK(slot->reserve_scratch(160, 8192));
  }
  return slot.get();
}

class KvQuantGpu : public ::testing::TestWithParam<Case> {
 protected:
  static void TearDownTestSuite() { backend_slot().reset(); }
};

class KvQuantGpuOps : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { backend_slot().reset(); }
};

TEST_P(KvQuantGpu, MatchesReference) { run_case(*backend(), GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cuda, KvQuantGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Groups of zeros, tiny (fp16 subnormal) and large values, every width: words and scales equal.
TEST_F(KvQuantGpuOps, ExtremeGroupsQuantizeBitEqual) {
  Backend& b = *backend();
  std::mt19937 rng(77);
  const int64_t kv_heads = 3, head_dim = 64, n = 11;  // 6 groups per token
  std::vector<float> k = normal_fp16(n * kv_heads * head_dim, rng);
  for (int64_t t = 0; t < n; ++t) {
    const float scale = t % 4 == 0 ? 0.0f : t % 4 == 1 ? 3e-6f : t % 4 == 2 ? 1500.0f : 1.0f;
    for (int64_t i = 0; i < kv_heads * head_dim; ++i) {
      float& x = k[t * kv_heads * head_dim + i];
      x = round_to_half(x * scale);
    }
  }
  const std::vector<float> v = normal_fp16(n * kv_heads * head_dim, rng, 40.0f);
  const Shape shape{n, kv_heads, head_dim};
  const std::vector<Seq> seqs = {{0, static_cast<int32_t>(n)}};
  const Layout l = make_layout(seqs, 8, rng);
  for (int bits = 2; bits <= 8; ++bits) {
    const CacheSpec spec{l.num_pages, 8, kv_heads, head_dim, bits, 10 - bits, 0};
    PagedKv ref = make_cache(spec, nullptr);
    PagedKv dev = make_cache(spec, &b);
    const Step st = make_step(seqs, false);
    const Tensor kt = Tensor::from_vector(k, shape), vt = Tensor::from_vector(v, shape);
    kv_write_ref(ref, l.tables[0], st.positions, kt, vt);
    b.kv_write(dev, to_device(b, f16_host(kt)), to_device(b, f16_host(vt)), device_meta(b, st, l));
    expect_side_equal(b, dev.k_words, dev.k_scales, ref.k_words, ref.k_scales, bits, absl::StrCat("extreme k", bits));
    expect_side_equal(b, dev.v_words, dev.v_scales, ref.v_words, ref.v_scales, 10 - bits,
                      absl::StrCat("extreme v", 10 - bits));
  }
}

// rope_kv_write on a quantized cache: the same q, k and cache words and scales as rope then kv_write.
TEST_F(KvQuantGpuOps, RopeKvWriteOnQuantizedCacheEqualsRopeThenWrite) {
  Backend& b = *backend();
  std::mt19937 rng(5);
  const int64_t heads = 8, kv_heads = 2, head_dim = 128;
  const std::vector<Seq> seqs = {{5, 3}, {40, 1}};
  const Layout l = make_layout(seqs, 16, rng);
  const Step st = make_step(seqs, false);
  const int64_t n = static_cast<int64_t>(st.positions.size());
  const Tensor q = f16_host(Tensor::from_vector(normal_fp16(n * heads * head_dim, rng), {n, heads, head_dim}));
  const Tensor k = f16_host(Tensor::from_vector(normal_fp16(n * kv_heads * head_dim, rng), {n, kv_heads, head_dim}));
  const Tensor v = f16_host(Tensor::from_vector(normal_fp16(n * kv_heads * head_dim, rng), {n, kv_heads, head_dim}));
  std::vector<float> inv_freq(head_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / head_dim));
  const Tensor freq = to_device(b, Tensor::from_vector(inv_freq, {static_cast<int64_t>(inv_freq.size())}));
  const CacheSpec spec{l.num_pages, 16, kv_heads, head_dim, 4, 3, 0};
  const StepMeta meta = device_meta(b, st, l);

  PagedKv fused = make_cache(spec, &b);
  Tensor q1 = to_device(b, q), k1 = to_device(b, k);
  b.rope_kv_write(q1, k1, to_device(b, v), freq, 1.0f, fused, meta);
  PagedKv split = make_cache(spec, &b);
  Tensor q2 = to_device(b, q), k2 = to_device(b, k);
  b.rope(q2, meta.positions, freq, 1.0f);
  b.rope(k2, meta.positions, freq, 1.0f);
  b.kv_write(split, k2, to_device(b, v), meta);
  ASSERT_TRUE(b.synchronize().ok());
  auto same = [&](const Tensor& x, const Tensor& y, const char* what) {
    const Tensor hx = to_host(b, x), hy = to_host(b, y);
    ASSERT_EQ(hx.nbytes(), hy.nbytes());
    EXPECT_EQ(std::memcmp(hx.raw(), hy.raw(), hx.nbytes()), 0) << what;
  };
  same(q1, q2, "q");
  same(k1, k2, "k");
  same(fused.k_words, split.k_words, "k_words");
  same(fused.k_scales, split.k_scales, "k_scales");
  same(fused.v_words, split.v_words, "v_words");
  same(fused.v_scales, split.v_scales, "v_scales");
}

// A decode step on a quantized cache with a window, captured into a CUDA graph and replayed: the
// same cache and output as the step run directly (no allocation or synchronisation in the ops, or
// the capture fails).
TEST_F(KvQuantGpuOps, QuantizedStepReplaysFromAGraph) {
  Backend& b = *backend();
  ASSERT_TRUE(b.supports_step_graphs());
  std::mt19937 rng(9);
  const int64_t heads = 16, kv_heads = 4, head_dim = 128;
  const std::vector<Seq> seqs = {{300, 1}, {17, 1}, {64, 1}};
  const Layout l = make_layout(seqs, 16, rng);
  const CacheSpec spec{l.num_pages, 16, kv_heads, head_dim, 4, 4, 100};
  const Step hist = make_step(seqs, true), st = make_step(seqs, false);
  const int64_t n = static_cast<int64_t>(st.positions.size());
  const int64_t hn = static_cast<int64_t>(hist.positions.size());
  const Tensor hk =
      to_device(b, f16_host(Tensor::from_vector(normal_fp16(hn * kv_heads * head_dim, rng), {hn, kv_heads, head_dim})));
  const Tensor hv =
      to_device(b, f16_host(Tensor::from_vector(normal_fp16(hn * kv_heads * head_dim, rng), {hn, kv_heads, head_dim})));
  const Tensor k =
      to_device(b, f16_host(Tensor::from_vector(normal_fp16(n * kv_heads * head_dim, rng), {n, kv_heads, head_dim})));
  const Tensor v =
      to_device(b, f16_host(Tensor::from_vector(normal_fp16(n * kv_heads * head_dim, rng), {n, kv_heads, head_dim})));
  const Tensor q =
      to_device(b, f16_host(Tensor::from_vector(normal_fp16(n * heads * head_dim, rng), {n, heads, head_dim})));
  const StepMeta hmeta = device_meta(b, hist, l), meta = device_meta(b, st, l);

  PagedKv direct = make_cache(spec, &b), graphed = make_cache(spec, &b);
  Tensor out_direct = device_zeros(b, DType::kF16, {n, heads, head_dim});
  Tensor out_graph = device_zeros(b, DType::kF16, {n, heads, head_dim});
  b.kv_write(direct, hk, hv, hmeta);
  b.kv_write(graphed, hk, hv, hmeta);
  b.kv_write(direct, k, v, meta);
  b.attention(q, direct, meta, out_direct);
  ASSERT_TRUE(b.synchronize().ok());
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = b.capture_step([&]() {
    b.kv_write(graphed, k, v, meta);
    b.attention(q, graphed, meta, out_graph);
    return absl::OkStatus();
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(b.replay_step(**graph).ok());
  ASSERT_TRUE(b.synchronize().ok());
  const Tensor a = to_host(b, out_direct), g = to_host(b, out_graph);
  EXPECT_EQ(std::memcmp(a.raw(), g.raw(), a.nbytes()), 0) << "graph replay output differs";
  const Tensor wa = to_host(b, direct.k_words), wg = to_host(b, graphed.k_words);
  EXPECT_EQ(std::memcmp(wa.raw(), wg.raw(), wa.nbytes()), 0) << "graph replay cache differs";
}

// The split plans (splits of at least 32 or 64 keys; the targets of both paths, 4096 and 16384
// rows, and one between) cover the keys in at most 64 splits of whole 32-key blocks, none empty,
// and their partials fit the scratch the backend reserves (attention_scratch_floats), for every
// batch and context.
TEST(KvQuantSplitPlan, CoversTheKeysWithinTheScratch) {
  for (int64_t target_rows : {int64_t{4096}, int64_t{10000}, attention_split::kMaxSplitTargetRows}) {
    for (int64_t min_keys : {32, 64}) {
      for (int64_t heads : {1, 8, 32, 48, 64}) {
        for (int64_t tokens : {1, 2, 3, 7, 16, 100, 127, 128, 129, 512}) {
          for (int32_t max_position : {0, 31, 32, 63, 1000, 2047, 2048, 4095, 131071}) {
            const attention_split::SplitPlan plan =
                attention_split::plan_splits(tokens, heads, max_position, min_keys, target_rows);
            const std::string what =
                absl::StrCat("target_rows ", target_rows, " min_keys ", min_keys, " heads ", heads, " tokens ", tokens,
                             " max_position ", max_position, ": splits ", plan.splits, " chunk ", plan.chunk);
            EXPECT_TRUE(plan.splits >= 1 && plan.splits <= 64) << what;
            EXPECT_EQ(plan.chunk % 32, 0) << what;
            EXPECT_GE(plan.splits * plan.chunk, int64_t{max_position} + 1) << what;
            EXPECT_LE((plan.splits - 1) * plan.chunk, int64_t{max_position}) << what;
            if (plan.splits > 1) {
              EXPECT_LE(tokens * heads * plan.splits * 130, attention_scratch_floats(tokens, heads, 128)) << what;
            }
          }
        }
      }
    }
  }
}

// Decode steps replayed from one CUDA graph captured for a bucket, as the step graphs do: the page
// table padded to the bucket's pages and max_position its last position, so the split plan (made
// at capture) is the bucket's (32 splits here) while the real contexts are shorter and move on
// each replay. Per step: kv_write + attention replayed with new positions, q, k and v uploaded
// into the captured buffers; the output within the attention budget of attention_ref and equal to
// the same attention run directly with the same metadata. Full causal at 4,4 and a window at 3,5.
TEST_F(KvQuantGpuOps, SplitDecodeReplaysFromABucketGraph) {
  Backend& b = *backend();
  ASSERT_TRUE(b.supports_step_graphs());
  const int64_t heads = 32, kv_heads = 8, head_dim = 128, page_size = 16, bucket_pages = 128, steps = 3;
  struct Config {
    int k_bits, v_bits;
    int64_t window;
  };
  for (const Config& cfg : {Config{4, 4, 0}, Config{3, 5, 700}}) {
    const std::string tag = absl::StrCat("bucket_graph_k", cfg.k_bits, "_v", cfg.v_bits, "_w", cfg.window);
    std::mt19937 rng(static_cast<uint32_t>(31 + cfg.k_bits + cfg.window));
    // Contexts before the first replayed step; the layout holds `steps` more tokens each.
    const std::vector<Seq> seqs = {{1500, static_cast<int32_t>(steps)},
                                   {700, static_cast<int32_t>(steps)},
                                   {20, static_cast<int32_t>(steps)}};
    const Layout l = make_layout(seqs, page_size, rng);
    ASSERT_LE(l.max_pages, bucket_pages);
    const int64_t n = static_cast<int64_t>(seqs.size());
    std::vector<int32_t> padded(static_cast<size_t>(n * bucket_pages), 0);
    for (int64_t s = 0; s < n; ++s) {
      std::copy(l.tables[s].begin(), l.tables[s].end(), padded.begin() + s * bucket_pages);
    }
    const CacheSpec spec{l.num_pages, page_size, kv_heads, head_dim, cfg.k_bits, cfg.v_bits, cfg.window};
    PagedKv ref = make_cache(spec, nullptr);
    PagedKv dev = make_cache(spec, &b);
    std::vector<Seq> history = seqs;
    for (Seq& h : history) h.fresh = 0;
    write_step(b, make_step(history, true), l, spec, ref, dev, rng);

    // The captured step's buffers: metadata of the bucket, q, k, v, out.
    std::vector<int32_t> token_seq(static_cast<size_t>(n));
    std::iota(token_seq.begin(), token_seq.end(), 0);
    StepMeta meta;
    meta.tokens = to_device(b, i32(std::vector<int32_t>(static_cast<size_t>(n), 0)));
    meta.positions = to_device(b, i32(std::vector<int32_t>(static_cast<size_t>(n), 0)));
    meta.token_seq = to_device(b, i32(token_seq));
    meta.page_table = to_device(b, Tensor::from_vector(padded, {n, bucket_pages}));
    meta.logit_rows = to_device(b, i32(token_seq));
    meta.num_tokens = n;
    meta.num_seqs = n;
    meta.max_pages = bucket_pages;
    meta.num_logit_rows = n;
    meta.max_position = static_cast<int32_t>(bucket_pages * page_size - 1);
    Tensor q = device_zeros(b, DType::kF16, {n, heads, head_dim});
    Tensor k = device_zeros(b, DType::kF16, {n, kv_heads, head_dim});
    Tensor v = device_zeros(b, DType::kF16, {n, kv_heads, head_dim});
    Tensor out_graph = device_zeros(b, DType::kF16, {n, heads, head_dim});
    Tensor out_direct = device_zeros(b, DType::kF16, {n, heads, head_dim});
    absl::StatusOr<std::unique_ptr<StepGraph>> graph = b.capture_step([&]() {
      b.kv_write(dev, k, v, meta);
      b.attention(q, dev, meta, out_graph);
      return absl::OkStatus();
    });
    ASSERT_TRUE(graph.ok()) << graph.status();

    for (int64_t step = 0; step < steps; ++step) {
      Step st;
      for (int64_t s = 0; s < n; ++s) {
        st.positions.push_back(seqs[s].context + static_cast<int32_t>(step));
        st.token_seq.push_back(static_cast<int32_t>(s));
      }
      const Tensor hq = Tensor::from_vector(normal_fp16(n * heads * head_dim, rng), {n, heads, head_dim});
      const Tensor hk = Tensor::from_vector(normal_fp16(n * kv_heads * head_dim, rng), {n, kv_heads, head_dim});
      const Tensor hv = Tensor::from_vector(normal_fp16(n * kv_heads * head_dim, rng), {n, kv_heads, head_dim});
      Tensor want = Tensor::zeros(DType::kF32, hq.shape());
      for (int64_t s = 0; s < n; ++s) {
        const std::span<const int32_t> pos(st.positions.data() + s, 1);
        kv_write_ref(ref, l.tables[s], pos, hk.rows(s, 1), hv.rows(s, 1));
        const Tensor o = attention_ref(hq.rows(s, 1), ref, l.tables[s], pos);
        std::copy_n(o.data<float>(), o.numel(), want.mutable_data<float>() + s * heads * head_dim);
      }
      b.upload(i32(st.positions), meta.positions);
      b.upload(f16_host(hq), q);
      b.upload(f16_host(hk), k);
      b.upload(f16_host(hv), v);
      ASSERT_TRUE(b.replay_step(**graph).ok());
      b.attention(q, dev, meta, out_direct);
      ASSERT_TRUE(b.synchronize().ok());
      const std::string what = absl::StrCat(tag, " step ", step);
      expect_attention_close(to_host(b, out_graph).to_f32(), want, what);
      const Tensor a = to_host(b, out_direct), g = to_host(b, out_graph);
      EXPECT_EQ(std::memcmp(a.raw(), g.raw(), a.nbytes()), 0) << what << ": graph replay differs from a direct run";
    }
    if (cfg.k_bits != 16) {
      expect_side_equal(b, dev.k_words, dev.k_scales, ref.k_words, ref.k_scales, cfg.k_bits, tag + " keys");
    }
  }
}

}  // namespace
}  // namespace exl3
