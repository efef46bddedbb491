// GPU tests of the small CUDA ops (kernels/cuda/elementwise.cuh) and of the paged KV write and
// attention (kernels/cuda/paged_attention.cuh) against their CPU references (kernels/ref/). One
// table: each op with its error budget (normalised MSE and max abs error) and its shape cases;
// every case draws fp16-representable inputs (fixed seeds), runs the reference in fp32 on the same
// values and the kernel on the device, and prints NMSE and max error (plus the first mismatches
// when over budget).
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

// ---- Host <-> device ---------------------------------------------------------------------------

// Device bytes that free themselves; errors abort through EXL3_CUDA_CHECK.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    EXL3_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)));
    EXL3_CUDA_CHECK(cudaMemset(ptr_, 0, std::max<size_t>(bytes, 16)));
  }
  ~DeviceBytes() { cudaFree(ptr_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void upload(const void* src) { EXL3_CUDA_CHECK(cudaMemcpy(ptr_, src, bytes_, cudaMemcpyHostToDevice)); }
  void download(void* dst) const { EXL3_CUDA_CHECK(cudaMemcpy(dst, ptr_, bytes_, cudaMemcpyDeviceToHost)); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

template <typename T>
std::unique_ptr<DeviceBytes> to_device(const std::vector<T>& values) {
  auto buffer = std::make_unique<DeviceBytes>(values.size() * sizeof(T));
  if (!values.empty()) buffer->upload(values.data());
  return buffer;
}

// `values` (already representable in `dtype`) stored on the device as `dtype`.
std::unique_ptr<DeviceBytes> to_device_as(const std::vector<float>& values, DType dtype) {
  if (dtype == DType::kF32) return to_device(values);
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = dtype == DType::kF16 ? float_to_half_bits(values[i]) : float_to_bf16_bits(values[i]);
  }
  return to_device(bits);
}

// n elements of `dtype` from the device, as floats (exact for F32, F16, BF16).
std::vector<float> from_device_as(const DeviceBytes& buffer, DType dtype, size_t n) {
  std::vector<float> out(n);
  if (dtype == DType::kF32) {
    if (n > 0) buffer.download(out.data());
    return out;
  }
  std::vector<uint16_t> bits(n);
  if (n > 0) buffer.download(bits.data());
  for (size_t i = 0; i < n; ++i) {
    out[i] = dtype == DType::kF16 ? half_bits_to_float(bits[i]) : bf16_bits_to_float(bits[i]);
  }
  return out;
}

void sync() { EXL3_CUDA_CHECK(cudaDeviceSynchronize()); }

// ---- Inputs ------------------------------------------------------------------------------------

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::kF16:
      return round_to_half(v);
    case DType::kBF16:
      return bf16_bits_to_float(float_to_bf16_bits(v));
    default:
      return v;
  }
}

// Uniform values in [lo, hi], rounded to `dtype` (fp16 by default: inputs both sides see exactly).
std::vector<float> random_values(size_t n, float lo, float hi, std::mt19937& rng, DType dtype = DType::kF16) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(dtype, dist(rng));
  return v;
}

std::vector<float> tensor_values(const Tensor& t) {
  const float* data = t.data<float>();
  return std::vector<float>(data, data + t.numel());
}

// ---- Error budgets -----------------------------------------------------------------------------

struct ErrorBudget {
  double nmse;     // Σ (got - want)² / Σ want²
  double max_abs;  // max |got - want|
};

struct Comparison {
  std::vector<float> got;
  std::vector<float> want;
};

struct ErrorStats {
  double nmse = 0.0;
  double max_abs = 0.0;
  size_t worst = 0;
  bool finite = true;
};

ErrorStats measure(const Comparison& c) {
  ErrorStats s;
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < c.got.size(); ++i) {
    if (c.got[i] == c.want[i]) {  // also equal infinities (conversions that overflow on both sides)
      if (std::isfinite(c.want[i])) ref2 += static_cast<double>(c.want[i]) * c.want[i];
      continue;
    }
    if (!std::isfinite(c.got[i]) || !std::isfinite(c.want[i])) {
      s.finite = false;
      continue;
    }
    const double e = std::fabs(static_cast<double>(c.got[i]) - c.want[i]);
    err2 += e * e;
    if (e > s.max_abs) {
      s.max_abs = e;
      s.worst = i;
    }
    ref2 += static_cast<double>(c.want[i]) * c.want[i];
  }
  s.nmse = ref2 > 0.0 ? err2 / ref2 : err2;
  return s;
}

// Prints the error summary; on failure also the first elements over the max-abs budget (or, when
// only the NMSE is over, the first differing ones).
bool within_budget(const std::string& name, const Comparison& c, const ErrorBudget& budget) {
  if (c.got.size() != c.want.size()) {
    std::printf("%s: size %zu vs reference %zu\n", name.c_str(), c.got.size(), c.want.size());
    return false;
  }
  const ErrorStats s = measure(c);
  std::printf("%-60s n=%-8zu nmse %.3g (budget %.3g)  max abs %.3g (budget %.3g)", name.c_str(), c.got.size(), s.nmse,
              budget.nmse, s.max_abs, budget.max_abs);
  if (!c.got.empty()) std::printf(" at %zu: got %.7g want %.7g", s.worst, c.got[s.worst], c.want[s.worst]);
  std::printf("\n");
  const bool ok = s.finite && s.nmse <= budget.nmse && s.max_abs <= budget.max_abs;
  if (!ok) {
    const double threshold = s.max_abs > budget.max_abs ? budget.max_abs : 0.0;
    int shown = 0;
    for (size_t i = 0; i < c.got.size() && shown < 10; ++i) {
      const double e = std::fabs(static_cast<double>(c.got[i]) - c.want[i]);
      if (c.got[i] != c.want[i] && !(e <= threshold)) {
        std::printf("  mismatch at %zu: got %.7g want %.7g (|err| %.3g)\n", i, c.got[i], c.want[i], e);
        ++shown;
      }
    }
  }
  return ok;
}

// ---- Elementwise ops ---------------------------------------------------------------------------

Comparison run_rms_norm(int64_t rows, int64_t dim, DType x_dtype, DType out_dtype, bool in_place, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> x = random_values(rows * dim, -2.0f, 2.0f, rng);
  const std::vector<float> w = random_values(dim, 0.5f, 1.5f, rng);
  constexpr float kEps = 1e-5f;
  const Tensor want = rms_norm_ref(Tensor::from_vector(x, {rows, dim}), Tensor::from_vector(w, {dim}), kEps);

  auto d_x = to_device_as(x, x_dtype);
  auto d_w = to_device(w);
  auto d_out = std::make_unique<DeviceBytes>(static_cast<size_t>(rows * dim) * dtype_size(out_dtype));
  RmsNormParams p;
  p.x = d_x->get();
  p.x_dtype = x_dtype;
  p.weight = d_w->as<float>();
  p.out = in_place ? d_x->get() : d_out->get();
  p.out_dtype = out_dtype;
  p.rows = rows;
  p.dim = dim;
  p.eps = kEps;
  launch_rms_norm(p, nullptr);
  sync();
  return {from_device_as(in_place ? *d_x : *d_out, out_dtype, rows * dim), tensor_values(want)};
}

Comparison run_add(int64_t n, DType y_dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> x = random_values(n, -4.0f, 4.0f, rng, DType::kF32);
  const std::vector<float> y = random_values(n, -4.0f, 4.0f, rng, y_dtype);
  Tensor want = Tensor::from_vector(x, {n});
  add_inplace_ref(want, Tensor::from_vector(y, {n}));

  auto d_x = to_device(x);
  auto d_y = to_device_as(y, y_dtype);
  launch_add({d_x->as<float>(), d_y->get(), y_dtype, n}, nullptr);
  sync();
  return {from_device_as(*d_x, DType::kF32, n), tensor_values(want)};
}

Comparison run_silu_mul(int64_t n, bool out_is_gate, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> gate = random_values(n, -4.0f, 4.0f, rng);
  const std::vector<float> up = random_values(n, -1.0f, 1.0f, rng);
  const Tensor want = silu_mul_ref(Tensor::from_vector(gate, {n}), Tensor::from_vector(up, {n}));

  auto d_gate = to_device_as(gate, DType::kF16);
  auto d_up = to_device_as(up, DType::kF16);
  auto d_out = std::make_unique<DeviceBytes>(static_cast<size_t>(n) * 2);
  const DeviceBytes& out = out_is_gate ? *d_gate : *d_out;
  launch_silu_mul({d_gate->as<__half>(), d_up->as<__half>(), out.as<__half>(), n}, nullptr);
  sync();
  return {from_device_as(out, DType::kF16, n), tensor_values(want)};
}

Comparison run_embedding(int64_t vocab, int64_t dim, int64_t n, DType table_dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> table = random_values(vocab * dim, -1.0f, 1.0f, rng, table_dtype);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> id_dist(0, static_cast<int32_t>(vocab - 1));
  for (int32_t& id : ids) id = id_dist(rng);
  ids[0] = static_cast<int32_t>(vocab - 1);
  if (n > 1) ids[1] = 0;
  const Tensor want = embedding_ref(Tensor::from_vector(table, {vocab, dim}), ids);

  auto d_table = to_device_as(table, table_dtype);
  auto d_ids = to_device(ids);
  auto d_out = std::make_unique<DeviceBytes>(static_cast<size_t>(n * dim) * 4);
  launch_embedding({d_table->get(), table_dtype, d_ids->as<int32_t>(), d_out->as<float>(), n, dim, vocab}, nullptr);
  sync();
  return {from_device_as(*d_out, DType::kF32, n * dim), tensor_values(want)};
}

Comparison run_rope(int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim, float scaling, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> x = random_values(tokens * heads * head_dim, -1.0f, 1.0f, rng);
  std::vector<int32_t> positions(tokens);
  std::uniform_int_distribution<int32_t> pos_dist(0, 8191);
  for (int32_t& p : positions) p = pos_dist(rng);
  positions[0] = 0;
  std::vector<float> inv_freq(rotary_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / rotary_dim));
  }
  Tensor want = Tensor::from_vector(x, {tokens, heads, head_dim});
  rope_ref(want, positions, inv_freq, scaling);

  auto d_x = to_device_as(x, DType::kF16);
  auto d_pos = to_device(positions);
  auto d_freq = to_device(inv_freq);
  RopeParams p;
  p.x = d_x->as<__half>();
  p.positions = d_pos->as<int32_t>();
  p.inv_freq = d_freq->as<float>();
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = head_dim;
  p.rotary_dim = rotary_dim;
  p.attention_scaling = scaling;
  launch_rope(p, nullptr);
  sync();
  return {from_device_as(*d_x, DType::kF16, tokens * heads * head_dim), tensor_values(want)};
}

Comparison run_gather_rows(int64_t src_rows, int64_t row_elems, int64_t num_rows, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> x = random_values(src_rows * row_elems, -8.0f, 8.0f, rng, dtype);
  std::vector<int32_t> rows(num_rows);
  std::uniform_int_distribution<int32_t> row_dist(0, static_cast<int32_t>(src_rows - 1));
  for (int32_t& r : rows) r = row_dist(rng);
  rows[0] = static_cast<int32_t>(src_rows - 1);
  std::vector<float> want;
  for (int32_t r : rows) want.insert(want.end(), x.begin() + r * row_elems, x.begin() + (r + 1) * row_elems);

  auto d_x = to_device_as(x, dtype);
  auto d_rows = to_device(rows);
  auto d_out = std::make_unique<DeviceBytes>(static_cast<size_t>(num_rows * row_elems) * dtype_size(dtype));
  const int64_t row_bytes = row_elems * static_cast<int64_t>(dtype_size(dtype));
  launch_gather_rows({d_x->get(), d_out->get(), d_rows->as<int32_t>(), num_rows, row_bytes, src_rows}, nullptr);
  sync();
  return {from_device_as(*d_out, dtype, num_rows * row_elems), want};
}

Comparison run_convert(int64_t n, DType in_dtype, DType out_dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  // Magnitudes from 2^-26 (fp16 subnormals and underflow) to 2^14, both signs; then exact ties.
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-26, 14);
  std::vector<float> in(n);
  for (float& v : in) v = round_to(in_dtype, std::ldexp(mantissa(rng), exponent(rng)) * ((rng() & 1) ? -1.0f : 1.0f));
  const float kTies[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                         65519.0f,        0x1p-24f,            0x1p-25f,       -0.0f};
  for (size_t i = 0; i < std::size(kTies) && i < in.size(); ++i) in[i] = round_to(in_dtype, kTies[i]);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = round_to(out_dtype, in[i]);

  auto d_in = to_device_as(in, in_dtype);
  auto d_out = std::make_unique<DeviceBytes>(static_cast<size_t>(n) * dtype_size(out_dtype));
  launch_convert({d_in->get(), in_dtype, d_out->get(), out_dtype, n}, nullptr);
  sync();
  return {from_device_as(*d_out, out_dtype, n), want};
}

// ---- Paged KV cache and attention --------------------------------------------------------------

struct SeqSpec {
  int32_t cached;      // positions already in the cache before this step
  int32_t new_tokens;  // tokens of this step (positions cached .. cached + new_tokens - 1)
};

struct AttentionScenario {
  int64_t heads, kv_heads, head_dim, page_size;
  std::vector<SeqSpec> seqs;
  bool interleave = false;  // batch order round-robin over sequences instead of sequence by sequence
};

// A scenario laid out on both sides: scattered page tables, history written into the cache by
// one kv_write, this step's tokens by a second, then attention; the reference cache gets the
// same rows through kv_write_ref.
struct AttentionRun {
  std::vector<float> k_pages, v_pages;  // device pages after both writes (F16 as floats)
  std::vector<float> ref_k_pages, ref_v_pages;
  std::vector<float> out, ref_out;      // [step tokens, heads, head_dim]
};

struct Batch {
  std::vector<int32_t> positions, token_seq;
  std::vector<int32_t> seq_index;  // index of the token inside its sequence's rows
};

// attend false: the cache writes only (any head_dim), no attention on either side.
AttentionRun run_attention_scenario(const AttentionScenario& sc, uint32_t seed, bool attend) {
  std::mt19937 rng(seed);
  const int64_t num_seqs = static_cast<int64_t>(sc.seqs.size());
  const int64_t row = sc.kv_heads * sc.head_dim;

  // Pages: a shuffled permutation of the physical pages, a few left unused.
  std::vector<int64_t> pages_of(num_seqs);
  int64_t total_pages = 0, max_pages = 1;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t len = sc.seqs[s].cached + sc.seqs[s].new_tokens;
    pages_of[s] = (len + sc.page_size - 1) / sc.page_size;
    total_pages += pages_of[s];
    max_pages = std::max(max_pages, pages_of[s]);
  }
  const int64_t num_pages = total_pages + 3;
  std::vector<int32_t> physical(num_pages);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  std::vector<int32_t> page_table(num_seqs * max_pages, 0);
  std::vector<std::vector<int32_t>> seq_pages(num_seqs);
  for (int64_t s = 0, next = 0; s < num_seqs; ++s) {
    for (int64_t i = 0; i < pages_of[s]; ++i) {
      page_table[s * max_pages + i] = physical[next];
      seq_pages[s].push_back(physical[next++]);
    }
  }

  // K/V of every position of every sequence; q of this step's tokens.
  std::vector<std::vector<float>> seq_k(num_seqs), seq_v(num_seqs), seq_q(num_seqs);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t len = sc.seqs[s].cached + sc.seqs[s].new_tokens;
    seq_k[s] = random_values(len * row, -1.0f, 1.0f, rng);
    seq_v[s] = random_values(len * row, -1.0f, 1.0f, rng);
    seq_q[s] = random_values(sc.seqs[s].new_tokens * sc.heads * sc.head_dim, -3.0f, 3.0f, rng);
  }

  // Batches: history (positions < cached, sequence by sequence) and this step's tokens.
  Batch history, step;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int32_t p = 0; p < sc.seqs[s].cached; ++p) {
      history.positions.push_back(p);
      history.token_seq.push_back(static_cast<int32_t>(s));
      history.seq_index.push_back(p);
    }
  }
  if (sc.interleave) {
    for (int32_t i = 0;; ++i) {
      bool any = false;
      for (int64_t s = 0; s < num_seqs; ++s) {
        if (i >= sc.seqs[s].new_tokens) continue;
        any = true;
        step.positions.push_back(sc.seqs[s].cached + i);
        step.token_seq.push_back(static_cast<int32_t>(s));
        step.seq_index.push_back(i);
      }
      if (!any) break;
    }
  } else {
    for (int64_t s = 0; s < num_seqs; ++s) {
      for (int32_t i = 0; i < sc.seqs[s].new_tokens; ++i) {
        step.positions.push_back(sc.seqs[s].cached + i);
        step.token_seq.push_back(static_cast<int32_t>(s));
        step.seq_index.push_back(i);
      }
    }
  }

  // Device side.
  const size_t page_elems = static_cast<size_t>(num_pages * sc.page_size * row);
  DeviceBytes d_k_pages(page_elems * 2), d_v_pages(page_elems * 2);
  auto d_page_table = to_device(page_table);
  auto write_batch = [&](const Batch& batch) {
    const int64_t n = static_cast<int64_t>(batch.positions.size());
    if (n == 0) return;
    std::vector<float> k(n * row), v(n * row);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t s = batch.token_seq[t];
      const int64_t src = static_cast<int64_t>(batch.positions[t]) * row;
      std::copy_n(seq_k[s].begin() + src, row, k.begin() + t * row);
      std::copy_n(seq_v[s].begin() + src, row, v.begin() + t * row);
    }
    auto d_k = to_device_as(k, DType::kF16);
    auto d_v = to_device_as(v, DType::kF16);
    auto d_pos = to_device(batch.positions);
    auto d_seq = to_device(batch.token_seq);
    KvWriteParams p;
    p.k = d_k->as<__half>();
    p.v = d_v->as<__half>();
    p.k_pages = d_k_pages.as<__half>();
    p.v_pages = d_v_pages.as<__half>();
    p.kv_heads = sc.kv_heads;
    p.head_dim = sc.head_dim;
    p.num_pages = num_pages;
    p.batch = {d_pos->as<int32_t>(), d_seq->as<int32_t>(), d_page_table->as<int32_t>(), n, num_seqs, max_pages,
               sc.page_size, *std::max_element(batch.positions.begin(), batch.positions.end())};
    launch_kv_write(p, nullptr);
    sync();
  };
  write_batch(history);
  write_batch(step);
  AttentionRun run;
  run.k_pages = from_device_as(d_k_pages, DType::kF16, page_elems);
  run.v_pages = from_device_as(d_v_pages, DType::kF16, page_elems);

  // Reference cache: each sequence written whole.
  PagedKv cache;
  cache.k_pages = Tensor::zeros(DType::kF32, {num_pages, sc.page_size, sc.kv_heads, sc.head_dim});
  cache.v_pages = Tensor::zeros(DType::kF32, {num_pages, sc.page_size, sc.kv_heads, sc.head_dim});
  cache.page_size = sc.page_size;
  cache.kv_heads = sc.kv_heads;
  cache.head_dim = sc.head_dim;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t len = sc.seqs[s].cached + sc.seqs[s].new_tokens;
    std::vector<int32_t> all_positions(len);
    std::iota(all_positions.begin(), all_positions.end(), 0);
    kv_write_ref(cache, seq_pages[s], all_positions, Tensor::from_vector(seq_k[s], {len, sc.kv_heads, sc.head_dim}),
                 Tensor::from_vector(seq_v[s], {len, sc.kv_heads, sc.head_dim}));
  }
  run.ref_k_pages = tensor_values(cache.k_pages);
  run.ref_v_pages = tensor_values(cache.v_pages);
  if (!attend) return run;

  const int64_t tokens = static_cast<int64_t>(step.positions.size());
  std::vector<float> q(tokens * sc.heads * sc.head_dim);
  const int64_t q_row = sc.heads * sc.head_dim;
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(seq_q[step.token_seq[t]].begin() + step.seq_index[t] * q_row, q_row, q.begin() + t * q_row);
  }
  auto d_q = to_device_as(q, DType::kF16);
  auto d_pos = to_device(step.positions);
  auto d_seq = to_device(step.token_seq);
  DeviceBytes d_out(q.size() * 2);
  const int64_t scratch_floats = attention_scratch_floats(tokens, sc.heads, sc.head_dim);
  DeviceBytes d_scratch(static_cast<size_t>(scratch_floats) * 4);
  AttentionParams ap;
  ap.q = d_q->as<__half>();
  ap.k_pages = d_k_pages.as<__half>();
  ap.v_pages = d_v_pages.as<__half>();
  ap.out = d_out.as<__half>();
  ap.heads = sc.heads;
  ap.kv_heads = sc.kv_heads;
  ap.head_dim = sc.head_dim;
  ap.num_pages = num_pages;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(sc.head_dim));
  ap.batch = {d_pos->as<int32_t>(), d_seq->as<int32_t>(), d_page_table->as<int32_t>(), tokens, num_seqs, max_pages,
              sc.page_size, *std::max_element(step.positions.begin(), step.positions.end())};
  ap.scratch = d_scratch.as<float>();
  ap.scratch_floats = scratch_floats;
  launch_attention(ap, nullptr);
  sync();

  run.out = from_device_as(d_out, DType::kF16, q.size());

  // Reference attention, sequence by sequence.
  run.ref_out.assign(q.size(), 0.0f);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t n = sc.seqs[s].new_tokens;
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), sc.seqs[s].cached);
    const Tensor out =
        attention_ref(Tensor::from_vector(seq_q[s], {n, sc.heads, sc.head_dim}), cache, seq_pages[s], positions);
    for (int64_t t = 0; t < tokens; ++t) {
      if (step.token_seq[t] != s) continue;
      std::copy_n(out.data<float>() + step.seq_index[t] * q_row, q_row, run.ref_out.begin() + t * q_row);
    }
  }
  return run;
}

Comparison kv_write_comparison(const AttentionScenario& sc, uint32_t seed) {
  AttentionRun run = run_attention_scenario(sc, seed, false);
  Comparison c{std::move(run.k_pages), std::move(run.ref_k_pages)};
  c.got.insert(c.got.end(), run.v_pages.begin(), run.v_pages.end());
  c.want.insert(c.want.end(), run.ref_v_pages.begin(), run.ref_v_pages.end());
  return c;
}

Comparison attention_comparison(const AttentionScenario& sc, uint32_t seed) {
  AttentionRun run = run_attention_scenario(sc, seed, true);
  return {std::move(run.out), std::move(run.ref_out)};
}

// Many short decode sequences: tokens · heads >= 4096, so no key splits.
AttentionScenario wide_decode_scenario() {
  AttentionScenario sc{32, 8, 128, 16, {}};
  std::mt19937 rng(99);
  std::uniform_int_distribution<int32_t> len(0, 300);
  for (int i = 0; i < 130; ++i) sc.seqs.push_back({len(rng), 1});
  return sc;
}

// The scenarios of kv_write and attention: name and layout.
struct NamedScenario {
  std::string name;
  AttentionScenario scenario;
};

std::vector<NamedScenario> attention_scenarios() {
  return {
      {"decode_mha_d64_p16", {8, 8, 64, 16, {{3000, 1}, {0, 1}, {16, 1}, {128, 1}, {700, 1}}}},
      {"decode_long_gqa8_d128_p256", {32, 4, 128, 256, {{2999, 1}, {4096, 1}, {15, 1}}}},
      {"decode_wide_gqa4_d128_p16", wide_decode_scenario()},
      {"prefill_gqa2_d64_p16", {4, 2, 64, 16, {{0, 200}}}},
      {"prefill_mha_odd_heads_d128_p256", {3, 3, 128, 256, {{0, 129}}}},
      {"chunked_prefill_gqa8_d128_p16", {8, 1, 128, 16, {{1000, 64}}}},
      {"mixed_gqa8_d128_p16", {16, 2, 128, 16, {{0, 77}, {3000, 1}, {50, 33}, {127, 1}, {255, 2}, {0, 1}}}},
      {"mixed_gqa8_d64_p256", {16, 2, 64, 256, {{0, 33}, {2500, 1}, {255, 17}, {1, 1}}}},
      {"mixed_gqa7_d128_p16", {14, 2, 128, 16, {{0, 40}, {2000, 1}, {5, 9}}}},
      {"mixed_mqa32_d64_p16", {32, 1, 64, 16, {{0, 17}, {500, 1}, {33, 3}}}},
      {"mixed_gqa4_odd_kv3_d64_p16", {12, 3, 64, 16, {{3, 127}, {1200, 1}, {0, 2}}}},
      {"interleaved_gqa2_d64_p16", {8, 4, 64, 16, {{10, 5}, {0, 3}, {100, 1}, {30, 4}}, true}},
  };
}

// ---- The table ---------------------------------------------------------------------------------

struct OpCase {
  std::string name;
  std::function<Comparison()> run;
};

struct OpSpec {
  std::string op;
  ErrorBudget budget;
  std::vector<OpCase> cases;
};

std::vector<OpSpec> op_table() {
  std::vector<OpSpec> table;
  uint32_t seed = 1000;

  // rms_norm: fp16 output rounding dominates (|y| < 4: half an ulp <= 2^-10).
  OpSpec rms{"rms_norm", {1e-6, 2e-3}, {}};
  const std::pair<int64_t, int64_t> rms_shapes[] = {{1, 4096}, {3, 1}, {17, 129}, {33, 127}, {5, 512},
                                                    {2, 8192}, {129, 64}, {4, 3}};
  struct RmsVariant {
    DType x, out;
    bool in_place;
  };
  const RmsVariant rms_variants[] = {{DType::kF32, DType::kF16, false}, {DType::kF16, DType::kF16, false},
                                     {DType::kF32, DType::kF32, false}, {DType::kF16, DType::kF32, false},
                                     {DType::kF16, DType::kF16, true},  {DType::kF32, DType::kF32, true}};
  for (const auto& [rows, dim] : rms_shapes) {
    for (const RmsVariant& v : rms_variants) {
      const uint32_t s = seed++;
      rms.cases.push_back({absl::StrCat(rows, "x", dim, "_", dtype_name(v.x), "_to_", dtype_name(v.out), v.in_place ? "_in_place" : ""),
                           [=] { return run_rms_norm(rows, dim, v.x, v.out, v.in_place, s); }});
    }
  }
  table.push_back(std::move(rms));

  // add: fp32 sums of the same values, exact.
  OpSpec add{"add", {0.0, 0.0}, {}};
  for (int64_t n : {1, 3, 17, 127, 129, 4096 * 3 + 1}) {
    for (DType y : {DType::kF32, DType::kF16}) {
      const uint32_t s = seed++;
      add.cases.push_back({absl::StrCat("n", n, "_", dtype_name(y)), [=] { return run_add(n, y, s); }});
    }
  }
  table.push_back(std::move(add));

  // silu_mul: |out| < 4, fp16 output (half an ulp <= 2^-10), plus expf's last bit.
  OpSpec silu{"silu_mul", {1e-6, 2e-3}, {}};
  for (int64_t n : {1, 3, 17, 33, 127, 129, 14336 * 2 + 1}) {
    const uint32_t s = seed++;
    silu.cases.push_back({absl::StrCat("n", n), [=] { return run_silu_mul(n, false, s); }});
  }
  {
    const uint32_t s = seed++;
    silu.cases.push_back({"n4097_out_is_gate", [=] { return run_silu_mul(4097, true, s); }});
  }
  table.push_back(std::move(silu));

  // embedding: a row copy with an exact widening, exact.
  OpSpec emb{"embedding", {0.0, 0.0}, {}};
  const std::pair<int64_t, int64_t> emb_shapes[] = {{1, 1}, {17, 3}, {3, 64}, {33, 129}, {5, 4096}};
  for (const auto& [n, dim] : emb_shapes) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const uint32_t s = seed++;
      emb.cases.push_back({absl::StrCat("n", n, "_dim", dim, "_", dtype_name(t)),
                           [=] { return run_embedding(1000, dim, n, t, s); }});
    }
  }
  table.push_back(std::move(emb));

  // rope: |out| < 1.25·√2, fp16 output (half an ulp <= 2^-11), cos/sin within 2 fp32 ulps.
  OpSpec rope{"rope", {1e-6, 1e-3}, {}};
  struct RopeShape {
    int64_t tokens, heads, head_dim, rotary_dim;
    float scaling;
  };
  const RopeShape rope_shapes[] = {{1, 8, 64, 64, 1.0f},   {3, 1, 128, 128, 1.0f}, {17, 3, 128, 64, 1.0f},
                                   {33, 8, 64, 32, 1.25f}, {5, 32, 128, 128, 0.8f}, {129, 2, 64, 2, 1.0f}};
  for (const RopeShape& r : rope_shapes) {
    const uint32_t s = seed++;
    const std::string name = absl::StrCat("t", r.tokens, "_h", r.heads, "_d", r.head_dim, "_rot", r.rotary_dim,
                                          "_scale", static_cast<int>(std::lround(r.scaling * 100)), "pc");
    rope.cases.push_back({name, [=] { return run_rope(r.tokens, r.heads, r.head_dim, r.rotary_dim, r.scaling, s); }});
  }
  table.push_back(std::move(rope));

  // gather_rows: a copy, exact.
  OpSpec gather{"gather_rows", {0.0, 0.0}, {}};
  struct GatherShape {
    int64_t src_rows, row_elems, num_rows;
    DType dtype;
  };
  const GatherShape gather_shapes[] = {{1, 1, 1, DType::kF32},    {17, 3, 33, DType::kF32},  {129, 4096, 3, DType::kF32},
                                       {5, 2, 17, DType::kF16},     {33, 34, 129, DType::kF16}, {7, 4096, 5, DType::kBF16},
                                       {64, 127, 1, DType::kF32}};
  for (const GatherShape& g : gather_shapes) {
    const uint32_t s = seed++;
    gather.cases.push_back({absl::StrCat("src", g.src_rows, "_row", g.row_elems, "_n", g.num_rows, "_", dtype_name(g.dtype)),
                            [=] { return run_gather_rows(g.src_rows, g.row_elems, g.num_rows, g.dtype, s); }});
  }
  table.push_back(std::move(gather));

  // convert: round to nearest even on both sides, exact.
  OpSpec convert{"convert", {0.0, 0.0}, {}};
  const DType float_types[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (DType in : float_types) {
    for (DType out : float_types) {
      for (int64_t n : {1, 17, 4099}) {
        const uint32_t s = seed++;
        convert.cases.push_back({absl::StrCat(dtype_name(in), "_to_", dtype_name(out), "_n", n),
                                 [=] { return run_convert(n, in, out, s); }});
      }
    }
  }
  table.push_back(std::move(convert));

  // kv_write: copies into the pages, exact (all pages compared, unwritten ones stay zero).
  OpSpec kv{"kv_write", {0.0, 0.0}, {}};
  for (const NamedScenario& ns : attention_scenarios()) {
    const uint32_t s = seed++;
    kv.cases.push_back({ns.name, [=] { return kv_write_comparison(ns.scenario, s); }});
  }
  {
    const uint32_t s = seed++;
    // Rows of 18 halves: the 2-byte copy path.
    kv.cases.push_back({"odd_row_kv3_d6_p16", [=] { return kv_write_comparison({3, 3, 6, 16, {{20, 3}, {0, 5}}}, s); }});
  }
  table.push_back(std::move(kv));

  // attention: fp16 probabilities in P·V (relative 2^-11) and fp16 output (|out| <= 1, half an
  // ulp <= 2^-12): max error below 1e-3; fp32 scores against the reference's doubles.
  OpSpec attn{"attention", {1e-5, 2e-3}, {}};
  for (const NamedScenario& ns : attention_scenarios()) {
    const uint32_t s = seed++;
    attn.cases.push_back({ns.name, [=] { return attention_comparison(ns.scenario, s); }});
  }
  table.push_back(std::move(attn));
  return table;
}

struct TableRow {
  std::string op;
  ErrorBudget budget;
  OpCase c;
};

std::vector<TableRow> table_rows() {
  std::vector<TableRow> rows;
  for (OpSpec& spec : op_table()) {
    for (OpCase& c : spec.cases) rows.push_back({spec.op, spec.budget, std::move(c)});
  }
  return rows;
}

void PrintTo(const TableRow& row, std::ostream* os) { *os << row.op << "/" << row.c.name; }

class CudaOpsTest : public ::testing::TestWithParam<TableRow> {
 protected:
  void SetUp() override { testing::require_cuda_device(); }
};

TEST_P(CudaOpsTest, MatchesCpuReference) {
  const TableRow& row = GetParam();
  const Comparison c = row.c.run();
  EXPECT_TRUE(within_budget(absl::StrCat(row.op, "/", row.c.name), c, row.budget))
      << row.op << "/" << row.c.name << " over its budget (nmse " << row.budget.nmse << ", max abs "
      << row.budget.max_abs << ")";
}

std::string row_name(const ::testing::TestParamInfo<TableRow>& info) {
  std::string name = absl::StrCat(info.param.op, "_", info.param.c.name);
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOpsTest, ::testing::ValuesIn(table_rows()), row_name);

// Contract checks that need no reference: empty launches do nothing and the scratch bound holds
// for every batch up to the size it was computed for.
TEST(CudaOpsContract, ScratchBoundCoversSmallerBatches) {
  for (int64_t heads : {1, 8, 32, 64}) {
    int64_t previous = 0;
    for (int64_t tokens = 1; tokens <= 512; ++tokens) {
      const int64_t bound = attention_scratch_floats(tokens, heads, 128);
      EXPECT_GE(bound, previous) << "tokens " << tokens << " heads " << heads;
      previous = bound;
    }
  }
  EXPECT_EQ(attention_scratch_floats(0, 8, 64), 0);
}

}  // namespace
}  // namespace exl3
