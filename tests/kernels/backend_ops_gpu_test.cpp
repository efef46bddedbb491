// GPU test of the CUDA backend, table-driven (in the manner of ggml's test-backend-ops): every op
// of kernels/backend.h runs through make_cuda_backend on uploaded inputs and is compared with its
// CPU reference (kernels/ops.h) on the same fp16-rounded inputs, over odd shapes, each op with its
// own error budget (normalised MSE and max abs error, see the budgets below). The same table runs
// on the CPU backend too (Cpu/…), which holds the harness itself to the references on any machine.
// Then the allocator's cap refusal and exact counting, staged uploads, weight conversions and the
// F16 range check.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/backend_tensors.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

// ---- Error budgets ------------------------------------------------------------------------------
// Inputs are rounded to the device dtype before both sides see them, so a budget only covers the
// device's own arithmetic.
struct Budget {
  double nmse;     // sum((got - want)²) / sum(want²)
  double max_abs;  // max |got - want|
};
// Copies, gathers and fp32 adds of the same numbers: bit-identical.
constexpr Budget kExact{0.0, 0.0};
// fp32 results computed in another order (or with rsqrtf): ~1e-7 relative.
constexpr Budget kF32Math{1e-10, 1e-5};
// One rounding to fp16 of outputs below 16 in magnitude: half an ulp is at most 2^-8 = 3.9e-3,
// and the mean squared relative rounding error is about (2^-11)² / 3 = 8e-8.
constexpr Budget kF16Rounded{5e-7, 5e-3};
// EXL3 linear: the GEMM input is rounded to fp16 twice (x ⊙ suh, then after the Hadamard), about
// 4e-4 relative rms, plus the output rounding; inputs are scaled so outputs are O(1).
constexpr Budget kExl3{2e-6, 2e-2};
// Dense linear into F32: fp16 products are exact in fp32, only the summation order differs.
constexpr Budget kDenseF32{1e-10, 1e-4};
// Attention: fp16 output rounding plus, in the kernels, fp16 probabilities for P · V.
constexpr Budget kAttention{2e-6, 5e-3};

// ---- Host tensors -------------------------------------------------------------------------------

// Deterministic seed per case name (FNV-1a), so a case sees the same data run alone or in the table.
uint32_t seed_of(const std::string& name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return h;
}

Tensor uniform(const Shape& shape, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::zeros(DType::kF32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

Tensor normal(const Shape& shape, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  Tensor t = Tensor::zeros(DType::kF32, shape);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// `f32` rounded (to nearest even) into a host tensor of `dtype` (F32, F16, BF16).
Tensor to_dtype(const Tensor& f32, DType dtype) {
  if (dtype == DType::kF32) return f32.clone();
  Tensor out = Tensor::zeros(dtype, f32.shape());
  auto* bits = static_cast<uint16_t*>(out.mutable_raw());
  const float* src = f32.data<float>();
  for (int64_t i = 0; i < f32.numel(); ++i) {
    bits[i] = dtype == DType::kF16 ? float_to_half_bits(src[i]) : float_to_bf16_bits(src[i]);
  }
  return out;
}

// The values a device of `dtype` sees: `f32` rounded to it and widened back.
Tensor rounded(const Tensor& f32, DType dtype) { return to_dtype(f32, dtype).to_f32(); }

Tensor i32(const std::vector<int32_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
}

std::vector<int32_t> random_ints(int64_t n, int32_t lo, int32_t hi, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// ---- Device helpers -----------------------------------------------------------------------------

using testing::device_zeros;
using testing::to_device;
using testing::to_host;

Tensor to_host_f32(Backend& b, const Tensor& dev) { return to_host(b, dev).to_f32(); }

// ---- Comparison ---------------------------------------------------------------------------------

struct Check {
  std::string what;
  Tensor got, want;  // host F32, same element count
  Budget budget;
};

struct ErrorStats {
  double ref_rms = 0.0;  // scale of the reference, for reading max_abs
  double nmse = 0.0;
  double max_abs = 0.0;
  int64_t worst = -1;
  int64_t nonfinite = 0;
};

ErrorStats measure(const Tensor& got, const Tensor& want) {
  EXL3_CHECK_EQ(got.numel(), want.numel());
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  double err2 = 0.0, ref2 = 0.0;
  ErrorStats s;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!std::isfinite(g[i])) {
      ++s.nonfinite;
      continue;
    }
    const double d = static_cast<double>(g[i]) - w[i];
    err2 += d * d;
    ref2 += static_cast<double>(w[i]) * w[i];
    if (s.worst < 0 || std::fabs(d) > s.max_abs) {
      s.max_abs = std::fabs(d);
      s.worst = i;
    }
  }
  s.nmse = ref2 > 0.0 ? err2 / ref2 : err2;
  s.ref_rms = got.numel() > 0 ? std::sqrt(ref2 / static_cast<double>(got.numel())) : 0.0;
  return s;
}

bool within(const ErrorStats& s, const Budget& b) {
  return s.nonfinite == 0 && s.nmse <= b.nmse && s.max_abs <= b.max_abs;
}

// Prints the first mismatches (beyond max_abs, or non-finite) of a failed check.
void print_mismatches(const Check& c) {
  const float* g = c.got.data<float>();
  const float* w = c.want.data<float>();
  int printed = 0;
  for (int64_t i = 0; i < c.got.numel() && printed < 8; ++i) {
    const double d = std::fabs(static_cast<double>(g[i]) - w[i]);
    if (std::isfinite(g[i]) && d <= c.budget.max_abs) continue;
    std::printf("    [%lld] got %.7g want %.7g (|diff| %.3g)\n", static_cast<long long>(i), g[i], w[i], d);
    ++printed;
  }
}

// ---- The op table -------------------------------------------------------------------------------

// Activations are uploaded as the backend's activation_dtype() (F16 on CUDA, F32 on the CPU) and
// the KV cache is its kv_dtype(); "act" in a case name stands for that dtype.
struct OpCase {
  std::string name;  // [A-Za-z0-9_]: the gtest parameter name
  std::function<std::vector<Check>(Backend&, std::mt19937&)> run;
  Device device = Device::kCuda;  // which backend runs it (set by all_cases)
};

// Printed by gtest for a failing parameter instead of the object's bytes.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

void add_embedding_cases(std::vector<OpCase>& cases) {
  struct Dims {
    int64_t vocab, dim, n;
  };
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (Dims d : {Dims{17, 33, 1}, Dims{129, 127, 17}, Dims{1000, 4096, 33}, Dims{3, 64, 129}}) {
      cases.push_back(
          {absl::StrCat("embedding_", dtype_name(dtype), "_v", d.vocab, "_d", d.dim, "_n", d.n),
           [=](Backend& b, std::mt19937& rng) {
             const Tensor table = to_dtype(normal({d.vocab, d.dim}, rng), dtype);
             const std::vector<int32_t> ids = random_ints(d.n, 0, static_cast<int32_t>(d.vocab - 1), rng);
             Tensor out = device_zeros(b, DType::kF32, {d.n, d.dim});
             b.embedding(to_device(b, table), to_device(b, i32(ids)), out);
             return std::vector<Check>{{"out", to_host_f32(b, out), embedding_ref(table.to_f32(), ids), kExact}};
           }});
    }
  }
}

void add_rms_norm_cases(std::vector<OpCase>& cases) {
  struct Dims {
    int64_t rows, dim;
  };
  enum class Mode { kF32ToAct, kActInPlace, kF32ToF32 };
  constexpr float kEps = 1e-5f;
  for (Mode mode : {Mode::kF32ToAct, Mode::kActInPlace, Mode::kF32ToF32}) {
    const char* mode_name = mode == Mode::kF32ToAct     ? "f32_to_act"
                            : mode == Mode::kActInPlace ? "act_in_place"
                                                        : "f32_to_f32";
    for (Dims d : {Dims{1, 4096}, Dims{3, 127}, Dims{17, 129}, Dims{33, 33}, Dims{129, 1000}}) {
      cases.push_back(
          {absl::StrCat("rms_norm_", mode_name, "_r", d.rows, "_d", d.dim), [=](Backend& b, std::mt19937& rng) {
             const Tensor weight = uniform({d.dim}, rng, 0.5f, 1.5f);
             const Tensor x = rounded(normal({d.rows, d.dim}, rng, 2.0f), DType::kF16);
             const Tensor want = rms_norm_ref(x, weight, kEps);
             const Tensor w_dev = to_device(b, weight);
             Tensor got;
             if (mode == Mode::kActInPlace) {
               Tensor xd = to_device(b, to_dtype(x, b.activation_dtype()));
               b.rms_norm(xd, w_dev, kEps, xd);
               got = to_host_f32(b, xd);
             } else {
               const DType out_dtype = mode == Mode::kF32ToAct ? b.activation_dtype() : DType::kF32;
               Tensor out = device_zeros(b, out_dtype, {d.rows, d.dim});
               b.rms_norm(to_device(b, x), w_dev, kEps, out);
               got = to_host_f32(b, out);
             }
             return std::vector<Check>{{"out", got, want, mode == Mode::kF32ToF32 ? kF32Math : kF16Rounded}};
           }});
    }
  }
}

void add_add_cases(std::vector<OpCase>& cases) {
  struct Dims {
    int64_t rows, cols;
  };
  for (bool y_act : {false, true}) {
    for (Dims d : {Dims{1, 1}, Dims{3, 17}, Dims{129, 33}, Dims{1, 12289}}) {
      cases.push_back(
          {absl::StrCat("add_y", y_act ? "act" : "F32", "_", d.rows, "x", d.cols), [=](Backend& b, std::mt19937& rng) {
             const DType y_dtype = y_act ? b.activation_dtype() : DType::kF32;
             const Tensor x = normal({d.rows, d.cols}, rng, 3.0f);
             const Tensor y = to_dtype(normal({d.rows, d.cols}, rng), y_dtype);
             Tensor want = x.clone();
             add_inplace_ref(want, y.to_f32());
             Tensor xd = to_device(b, x);
             b.add(xd, to_device(b, y));
             return std::vector<Check>{{"x", to_host_f32(b, xd), want, kExact}};
           }});
    }
  }
}

void add_silu_mul_cases(std::vector<OpCase>& cases) {
  struct Dims {
    int64_t rows, cols;
  };
  for (Dims d : {Dims{1, 14336}, Dims{3, 127}, Dims{17, 129}, Dims{129, 33}, Dims{1, 1}}) {
    cases.push_back({absl::StrCat("silu_mul_", d.rows, "x", d.cols), [=](Backend& b, std::mt19937& rng) {
                       // |silu(g) · u| < 8.6 for g, u in [-3, 3].
                       const Tensor gate = rounded(uniform({d.rows, d.cols}, rng, -3.0f, 3.0f), DType::kF16);
                       const Tensor up = rounded(uniform({d.rows, d.cols}, rng, -3.0f, 3.0f), DType::kF16);
                       const DType act = b.activation_dtype();
                       Tensor out = device_zeros(b, act, {d.rows, d.cols});
                       b.silu_mul(to_device(b, to_dtype(gate, act)), to_device(b, to_dtype(up, act)), out);
                       return std::vector<Check>{{"out", to_host_f32(b, out), silu_mul_ref(gate, up), kF16Rounded}};
                     }});
  }
}

void add_rope_cases(std::vector<OpCase>& cases) {
  struct Dims {
    int64_t tokens, heads, head_dim, rotary_dim;
    float scaling;
  };
  for (Dims d : {Dims{1, 32, 128, 128, 1.0f}, Dims{3, 8, 64, 64, 1.0f}, Dims{17, 4, 128, 64, 1.0f},
                 Dims{129, 2, 64, 64, 1.2f}, Dims{5, 3, 34, 34, 1.0f}, Dims{33, 1, 96, 32, 0.8f}}) {
    cases.push_back({absl::StrCat("rope_t", d.tokens, "_h", d.heads, "_hd", d.head_dim, "_rot", d.rotary_dim,
                                  d.scaling == 1.0f ? "" : "_scaled"),
                     [=](Backend& b, std::mt19937& rng) {
                       const Tensor x = rounded(normal({d.tokens, d.heads, d.head_dim}, rng), DType::kF16);
                       const std::vector<int32_t> positions = random_ints(d.tokens, 0, 8191, rng);
                       std::vector<float> inv_freq(static_cast<size_t>(d.rotary_dim / 2));
                       for (size_t i = 0; i < inv_freq.size(); ++i) {
                         inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / d.rotary_dim));
                       }
                       Tensor want = x.clone();
                       rope_ref(want, positions, inv_freq, d.scaling);
                       Tensor xd = to_device(b, to_dtype(x, b.activation_dtype()));
                       b.rope(xd, to_device(b, i32(positions)),
                              to_device(b, Tensor::from_vector(inv_freq, {static_cast<int64_t>(inv_freq.size())})),
                              d.scaling);
                       return std::vector<Check>{{"x", to_host_f32(b, xd), want, kF16Rounded}};
                     }});
  }
}

void add_gather_rows_cases(std::vector<OpCase>& cases) {
  struct Dims {
    DType dtype;
    int64_t src_rows, cols, rows;
  };
  for (Dims d : {Dims{DType::kF32, 17, 33, 4}, Dims{DType::kF16, 129, 64, 33}, Dims{DType::kF32, 3, 127, 1},
                 Dims{DType::kI32, 5, 3, 7}, Dims{DType::kF16, 1, 4098, 3}}) {
    cases.push_back(
        {absl::StrCat("gather_rows_", dtype_name(d.dtype), "_", d.src_rows, "x", d.cols, "_r", d.rows),
         [=](Backend& b, std::mt19937& rng) {
           Tensor x;
           if (d.dtype == DType::kI32) {
             x = Tensor::from_vector(random_ints(d.src_rows * d.cols, -1000, 1000, rng), {d.src_rows, d.cols});
           } else {
             x = to_dtype(normal({d.src_rows, d.cols}, rng), d.dtype);
           }
           const std::vector<int32_t> rows = random_ints(d.rows, 0, static_cast<int32_t>(d.src_rows - 1), rng);
           const Tensor xf = x.to_f32();
           Tensor want = Tensor::zeros(DType::kF32, {d.rows, d.cols});
           for (int64_t i = 0; i < d.rows; ++i) {
             std::copy_n(xf.data<float>() + rows[i] * d.cols, d.cols, want.mutable_data<float>() + i * d.cols);
           }
           Tensor out = device_zeros(b, d.dtype, {d.rows, d.cols});
           b.gather_rows(to_device(b, x), to_device(b, i32(rows)), out);
           return std::vector<Check>{{"out", to_host_f32(b, out), want, kExact}};
         }});
  }
}

const char* codebook_name(Codebook cb) {
  switch (cb) {
    case Codebook::k3Inst:
      return "3inst";
    case Codebook::kMcg:
      return "mcg";
    case Codebook::kMul1:
      return "mul1";
  }
  return "?";
}

struct Exl3Case {
  int64_t k, n, in_features, out_features;
  int bits;
  Codebook codebook;
  int64_t m;
  bool y_f32, bias;
};

// A random EXL3 linear of the case's shape (trellis words, sign-and-scale vectors as EXL3 stores
// them; suh ~ 1/sqrt(in) keeps the outputs O(1)) and optionally a bias.
HostLinear random_exl3_linear(std::mt19937& rng, const Exl3Case& c) {
  HostLinear h;
  h.in_features = c.in_features;
  h.out_features = c.out_features;
  h.is_exl3 = true;
  h.exl3.k = c.k;
  h.exl3.n = c.n;
  h.exl3.bits = c.bits;
  h.exl3.codebook = c.codebook;
  std::vector<int16_t> words(static_cast<size_t>(c.k / 16 * c.n / 16 * 16 * c.bits));
  for (int16_t& w : words) w = static_cast<int16_t>(rng() & 0xFFFFu);
  h.exl3.trellis = Tensor::from_vector(words, {c.k / 16, c.n / 16, 16 * c.bits});
  std::bernoulli_distribution sign(0.5);
  Tensor suh = uniform({c.k}, rng, 0.5f, 1.0f);
  Tensor svh = uniform({c.n}, rng, 0.5f, 1.5f);
  for (int64_t i = 0; i < c.k; ++i) {
    suh.mutable_data<float>()[i] *= (sign(rng) ? -1.0f : 1.0f) / std::sqrt(static_cast<float>(c.in_features));
  }
  for (int64_t i = 0; i < c.n; ++i) svh.mutable_data<float>()[i] *= sign(rng) ? -1.0f : 1.0f;
  h.exl3.suh = to_dtype(suh, DType::kF16);
  h.exl3.svh = to_dtype(svh, DType::kF16);
  if (c.bias) h.bias = uniform({c.out_features}, rng, -1.0f, 1.0f);
  return h;
}

// exl3_linear_ref of x F32 [m, in_features] (zero-padded to k), cut to out_features, + bias.
Tensor exl3_reference(const HostLinear& h, const Tensor& x) {
  const int64_t m = x.dim(0), k = h.exl3.k, n = h.exl3.n, in = h.in_features, out = h.out_features;
  Tensor x_padded = Tensor::zeros(DType::kF32, {m, k});
  for (int64_t r = 0; r < m; ++r) std::copy_n(x.data<float>() + r * in, in, x_padded.mutable_data<float>() + r * k);
  const Tensor full = exl3_linear_ref(h.exl3, x_padded);  // [m, n], no bias
  Tensor want = Tensor::zeros(DType::kF32, {m, out});
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      want.mutable_data<float>()[r * out + j] =
          full.data<float>()[r * n + j] + (h.bias.defined() ? h.bias.data<float>()[j] : 0.0f);
    }
  }
  return want;
}

LinearWeights prepared(Backend& b, const HostLinear& h) {
  absl::StatusOr<LinearWeights> w = b.prepare_linear(h, "test.exl3_linear");
  EXL3_CHECK_OK(w.status());
  return *std::move(w);
}

std::vector<Check> run_exl3_linear(Backend& b, std::mt19937& rng, const Exl3Case& c) {
  const HostLinear h = random_exl3_linear(rng, c);
  const Tensor x = rounded(normal({c.m, c.in_features}, rng), DType::kF16);
  const Tensor want = exl3_reference(h, x);
  const LinearWeights w = prepared(b, h);
  if (b.device() == Device::kCuda) {  // the trellis is kept, not expanded
    EXPECT_EQ(w.bytes, h.exl3.trellis.nbytes() + h.exl3.suh.nbytes() + h.exl3.svh.nbytes() +
                           (c.bias ? static_cast<size_t>(c.out_features) * 4 : 0));
  }
  Tensor y = device_zeros(b, c.y_f32 ? DType::kF32 : b.activation_dtype(), {c.m, c.out_features});
  b.linear(w, to_device(b, to_dtype(x, b.activation_dtype())), y);
  return {{"y", to_host_f32(b, y), want, kExl3}};
}

// Three linears of q/k/v-like widths (300 of 384, 128, 100 of 128) of one 250-wide input, outputs
// of both dtypes, with their exl3_linear_ref outputs for the input x (F32, as the device sees it).
struct QkvLikeLinears {
  std::vector<LinearWeights> ws;
  std::vector<Tensor> ys, wants;
  std::array<const LinearWeights*, 3> ptrs{};
};

QkvLikeLinears qkv_like_linears(Backend& b, std::mt19937& rng, int64_t m, int bits, Codebook cb, const Tensor& x) {
  const Exl3Case shapes[] = {{256, 384, 250, 300, bits, cb, m, false, true},
                             {256, 128, 250, 128, bits, cb, m, true, false},
                             {256, 128, 250, 100, bits, cb, m, false, false}};
  QkvLikeLinears l;
  for (const Exl3Case& c : shapes) {
    const HostLinear h = random_exl3_linear(rng, c);
    l.wants.push_back(exl3_reference(h, x));
    l.ws.push_back(prepared(b, h));
    l.ys.push_back(device_zeros(b, c.y_f32 ? DType::kF32 : b.activation_dtype(), {m, c.out_features}));
  }
  for (size_t i = 0; i < l.ptrs.size(); ++i) l.ptrs[i] = &l.ws[i];
  return l;
}

std::vector<Check> qkv_like_checks(Backend& b, const QkvLikeLinears& l) {
  std::vector<Check> checks;
  for (size_t i = 0; i < l.ys.size(); ++i) {
    checks.push_back({absl::StrCat("y", i), to_host_f32(b, l.ys[i]), l.wants[i], kExl3});
  }
  return checks;
}

// Backend::linears: the q/k/v-like linears of one x; against exl3_linear_ref each.
std::vector<Check> run_fused_linears(Backend& b, std::mt19937& rng, int64_t m, int bits, Codebook cb) {
  const Tensor x = rounded(normal({m, 250}, rng), DType::kF16);
  QkvLikeLinears l = qkv_like_linears(b, rng, m, bits, cb, x);
  b.linears(l.ptrs, to_device(b, to_dtype(x, b.activation_dtype())), l.ys);
  return qkv_like_checks(b, l);
}

// Backend::gate_up_silu: act = silu(x · gate) ⊙ (x · up) of the fp16-rounded (CUDA) or fp32 (CPU)
// linear outputs, as silu_mul_ref of the references.
std::vector<Check> run_gate_up_silu(Backend& b, std::mt19937& rng, int64_t m, int bits, Codebook cb) {
  const Exl3Case c{256, 384, 250, 300, bits, cb, m, false, false};
  const Tensor x = rounded(normal({m, 250}, rng), DType::kF16);
  const HostLinear gate = random_exl3_linear(rng, c);
  const HostLinear up = random_exl3_linear(rng, c);
  const DType a = b.activation_dtype();
  const Tensor want = silu_mul_ref(rounded(exl3_reference(gate, x), a), rounded(exl3_reference(up, x), a));
  const LinearWeights gw = prepared(b, gate), uw = prepared(b, up);
  Tensor g = device_zeros(b, a, {m, 300}), u = device_zeros(b, a, {m, 300}), act = device_zeros(b, a, {m, 300});
  b.gate_up_silu(gw, uw, to_device(b, to_dtype(x, a)), g, u, act, nullptr);
  return {{"act", to_host_f32(b, act), want, kExl3}};
}

// Backend::linear_add: residual (F32) += x · w, against residual + exl3_linear_ref.
std::vector<Check> run_linear_add(Backend& b, std::mt19937& rng, int64_t m, int bits, Codebook cb) {
  const Exl3Case c{384, 256, 384, 200, bits, cb, m, true, true};
  const Tensor x = rounded(normal({m, 384}, rng), DType::kF16);
  const HostLinear h = random_exl3_linear(rng, c);
  const Tensor residual = normal({m, 200}, rng, 3.0f);
  Tensor want = exl3_reference(h, x);
  for (int64_t i = 0; i < want.numel(); ++i) want.mutable_data<float>()[i] += residual.data<float>()[i];
  const LinearWeights w = prepared(b, h);
  Tensor out = device_zeros(b, DType::kF32, {m, 200});
  Tensor res = to_device(b, residual);
  b.linear_add(w, to_device(b, to_dtype(x, b.activation_dtype())), out, res, nullptr, nullptr);
  return {{"residual", to_host_f32(b, res), want, kExl3}};
}

// Backend::norm_linears and norm_gate_up_silu: the layer's RMSNorm of an F32 residual (rounded to
// the activation dtype, as rms_norm writes it) and the linears of q/k/v-like widths, or gate and up,
// that read it; against rms_norm_ref, then exl3_linear_ref (and silu_mul_ref).
std::vector<Check> run_norm_linears(Backend& b, std::mt19937& rng, int64_t m, int bits, Codebook cb, bool gated) {
  constexpr float kEps = 1e-5f;
  const DType a = b.activation_dtype();
  const Tensor x = normal({m, 250}, rng, 2.0f);
  const Tensor weight = uniform({250}, rng, 0.5f, 1.5f);
  const Tensor h_want = rounded(rms_norm_ref(x, weight, kEps), a);
  const Tensor x_dev = to_device(b, x), w_dev = to_device(b, weight);
  Tensor h = device_zeros(b, a, {m, 250});
  if (gated) {
    const Exl3Case c{256, 384, 250, 300, bits, cb, m, false, false};
    const HostLinear gate = random_exl3_linear(rng, c);
    const HostLinear up = random_exl3_linear(rng, c);
    const Tensor want = silu_mul_ref(rounded(exl3_reference(gate, h_want), a), rounded(exl3_reference(up, h_want), a));
    const LinearWeights gw = prepared(b, gate), uw = prepared(b, up);
    Tensor g = device_zeros(b, a, {m, 300}), u = device_zeros(b, a, {m, 300}), act = device_zeros(b, a, {m, 300});
    b.norm_gate_up_silu(x_dev, w_dev, kEps, h, gw, uw, g, u, act, nullptr, nullptr);
    return {{"act", to_host_f32(b, act), want, kExl3}};
  }
  QkvLikeLinears l = qkv_like_linears(b, rng, m, bits, cb, h_want);
  b.norm_linears(x_dev, w_dev, kEps, h, l.ptrs, l.ys, nullptr);
  return qkv_like_checks(b, l);
}

// A linear_add that hands the next RMSNorm off (NormHandoff) to the linears of the normed residual:
// residual (F32 [m, dim]) += x · w, then norm_linears (three linears, q/k/v-like widths) or
// norm_gate_up_silu of the new residual. Against residual + exl3_linear_ref, rms_norm_ref (rounded
// to the activation dtype) and exl3_linear_ref (and silu_mul_ref) of it, and against the same norm
// op run again without the hand-off. CUDA, kGemvHandoffMinRows (2) rows or more: the hand-off must
// be taken (the output pass does the norm and the linears' input transforms) and consumed; below,
// and on the CPU backend, it is not taken.
struct HandoffCase {
  int64_t m;
  int64_t dim;
  Codebook codebook;
  bool gated;
};

std::vector<Check> run_norm_handoff(Backend& b, std::mt19937& rng, const HandoffCase& c, const Budget& budget) {
  constexpr float kEps = 1e-5f;
  const DType a = b.activation_dtype();
  const int64_t m = c.m, dim = c.dim;
  const Tensor xp = rounded(normal({m, 384}, rng), DType::kF16);
  const HostLinear producer = random_exl3_linear(rng, {384, dim, 384, dim, 4, c.codebook, m, true, true});
  const Tensor r0 = normal({m, dim}, rng, 3.0f);
  Tensor res_want = exl3_reference(producer, xp);
  for (int64_t i = 0; i < res_want.numel(); ++i) res_want.mutable_data<float>()[i] += r0.data<float>()[i];
  const Tensor weight = uniform({dim}, rng, 0.5f, 1.5f);
  const Tensor h_want = rounded(rms_norm_ref(res_want, weight, kEps), a);

  const LinearWeights wp = prepared(b, producer);
  const Tensor w_dev = to_device(b, weight);
  Tensor res = to_device(b, r0);
  Tensor out = device_zeros(b, DType::kF32, {m, dim});
  Tensor h = device_zeros(b, a, {m, dim});
  std::vector<Exl3Case> shapes;
  if (c.gated) {
    shapes = {{dim, 384, dim, 300, 4, c.codebook, m, false, false},
              {dim, 384, dim, 300, 4, c.codebook, m, false, false}};
  } else {
    shapes = {{dim, 384, dim, 300, 4, c.codebook, m, false, true},
              {dim, 128, dim, 128, 4, c.codebook, m, true, false},
              {dim, 128, dim, 100, 4, c.codebook, m, false, false}};
  }
  std::vector<HostLinear> hosts;
  std::vector<LinearWeights> ws;
  for (const Exl3Case& s : shapes) hosts.push_back(random_exl3_linear(rng, s));
  for (const HostLinear& hl : hosts) ws.push_back(prepared(b, hl));
  NormHandoff handoff{&w_dev, kEps, {}, static_cast<int>(ws.size())};
  for (size_t i = 0; i < ws.size(); ++i) handoff.linears[i] = &ws[i];
  const std::span<const LinearWeights* const> ptrs(handoff.linears.data(), ws.size());

  b.linear_add(wp, to_device(b, to_dtype(xp, a)), out, res, &handoff, nullptr);
  const bool prepared_it = handoff.prepared;
  EXPECT_EQ(prepared_it, b.device() == Device::kCuda && m >= kGemvHandoffMinRows) << "m " << m << " dim " << dim;
  std::vector<Check> checks = {{"residual", to_host_f32(b, res), res_want, budget}};
  // Runs the norm op (with `with`) into fresh outputs: host F32 copies of them.
  const auto run_norm_op = [&](NormHandoff* with) {
    std::vector<Tensor> got;
    if (c.gated) {
      Tensor g = device_zeros(b, a, {m, 300}), u = device_zeros(b, a, {m, 300}), act = device_zeros(b, a, {m, 300});
      b.norm_gate_up_silu(res, w_dev, kEps, h, ws[0], ws[1], g, u, act, with, nullptr);
      got.push_back(to_host_f32(b, act));
    } else {
      std::vector<Tensor> ys;
      for (const Exl3Case& s : shapes) ys.push_back(device_zeros(b, s.y_f32 ? DType::kF32 : a, {m, s.out_features}));
      b.norm_linears(res, w_dev, kEps, h, ptrs, ys, with);
      for (const Tensor& y : ys) got.push_back(to_host_f32(b, y));
    }
    return got;
  };
  const std::vector<Tensor> handed = run_norm_op(&handoff);
  EXPECT_FALSE(handoff.prepared) << "the norm op consumes the hand-off";
  const std::vector<Tensor> unfused = run_norm_op(nullptr);
  std::vector<Tensor> wants;
  if (c.gated) {
    wants.push_back(
        silu_mul_ref(rounded(exl3_reference(hosts[0], h_want), a), rounded(exl3_reference(hosts[1], h_want), a)));
  } else {
    for (const HostLinear& hl : hosts) wants.push_back(exl3_reference(hl, h_want));
  }
  for (size_t i = 0; i < handed.size(); ++i) {
    checks.push_back({absl::StrCat("y", i), handed[i], wants[i], budget});
    checks.push_back({absl::StrCat("y", i, "_as_unfused"), handed[i], unfused[i], budget});
  }
  return checks;
}

void add_norm_handoff_cases(std::vector<OpCase>& cases) {
  // dim 256: clusters of 2 blocks of one output; 1024: 8 of one; 4096: 8 of 4 (an 8B's hidden).
  for (Codebook cb : {Codebook::k3Inst, Codebook::kMul1}) {
    for (int64_t m : {2, 3, 5, 8, 16, 33}) {
      for (int64_t dim : {256, 1024, 4096}) {
        for (bool gated : {false, true}) {
          const HandoffCase c{m, dim, cb, gated};
          cases.push_back({absl::StrCat("linear_add_handoff_", gated ? "gate_up" : "linears", "_", codebook_name(cb),
                                        "_m", m, "_d", dim),
                           [=](Backend& b, std::mt19937& rng) { return run_norm_handoff(b, rng, c, kExl3); }});
        }
      }
    }
  }
}

// A gated product that may hand the down projection its input (InputHandoff): gate_up_silu of x,
// then linear_add (residual F32 += act · down) of its act. Against silu_mul_ref of the references,
// then residual + exl3_linear_ref of the act it gives, and against the same linear_add run again
// without the hand-off (the staged input holds the same bits). `taken`: whether the hand-off must
// be prepared (unset: either). `norm_next`: the linear_add also hands the next RMSNorm off to a
// linear of the new residual (both hand-offs in one linear_add, as the model's down projection
// does), checked against the same norm_linears after the plain linear_add. `intervene`: another
// linear of 8 rows runs after each hand-off is prepared and before its consumer (the down
// projection itself, whose input staging overwrites the scratch a hand-off lives in): each consumer
// must then compute without the hand-off it is given.
struct InputHandoffCase {
  int64_t m;
  int64_t width;
  Codebook codebook;
  std::optional<bool> taken;
  bool norm_next = false;
  bool intervene = false;
};

std::vector<Check> run_input_handoff(Backend& b, std::mt19937& rng, const InputHandoffCase& c, const Budget& budget) {
  const DType a = b.activation_dtype();
  const int64_t m = c.m, width = c.width;
  const Tensor x = rounded(normal({m, 384}, rng), DType::kF16);
  const Exl3Case gated_shape{384, width, 384, width, 4, c.codebook, m, false, false};
  const HostLinear gate = random_exl3_linear(rng, gated_shape);
  const HostLinear up = random_exl3_linear(rng, gated_shape);
  const int64_t dim = c.norm_next ? 256 : 200;  // the residual's width (a norm hand-off takes all of n)
  const HostLinear down = random_exl3_linear(rng, {width, 256, width, dim, 4, c.codebook, m, true, true});
  const Tensor act_want = silu_mul_ref(rounded(exl3_reference(gate, x), a), rounded(exl3_reference(up, x), a));
  const Tensor r0 = normal({m, dim}, rng, 3.0f);
  constexpr float kEps = 1e-5f;
  const Tensor norm_weight = to_device(b, uniform({dim}, rng, 0.5f, 1.5f));
  const LinearWeights nw = prepared(b, random_exl3_linear(rng, {256, 128, dim, 100, 4, c.codebook, m, false, false}));
  const LinearWeights* next_ptrs[] = {&nw};
  // The next linear of the residual's RMSNorm (with `with`, the linear_add's hand-off), host F32.
  const auto norm_then_linear = [&](const Tensor& residual, NormHandoff* with) {
    Tensor h = device_zeros(b, a, {m, dim});
    Tensor ys[] = {device_zeros(b, a, {m, 100})};
    b.norm_linears(residual, norm_weight, kEps, h, next_ptrs, ys, with);
    return to_host_f32(b, ys[0]);
  };

  const LinearWeights gw = prepared(b, gate), uw = prepared(b, up), dw = prepared(b, down);
  const Tensor other_x = to_device(b, to_dtype(rounded(normal({8, width}, rng), DType::kF16), a));
  Tensor other_y = device_zeros(b, DType::kF32, {8, dim});
  const auto maybe_intervene = [&]() {
    if (c.intervene) b.linear(dw, other_x, other_y);
  };
  Tensor g = device_zeros(b, a, {m, width}), u = device_zeros(b, a, {m, width}), act = device_zeros(b, a, {m, width});
  InputHandoff handoff{&dw};
  b.gate_up_silu(gw, uw, to_device(b, to_dtype(x, a)), g, u, act, &handoff);
  if (c.taken.has_value()) {
    EXPECT_EQ(handoff.prepared, *c.taken) << "m " << m << " width " << width;
  }
  const Tensor act_got = to_host_f32(b, act);
  Tensor res_want = exl3_reference(down, rounded(act_got, a));
  for (int64_t i = 0; i < res_want.numel(); ++i) res_want.mutable_data<float>()[i] += r0.data<float>()[i];

  Tensor out = device_zeros(b, DType::kF32, {m, dim});
  Tensor res = to_device(b, r0);
  NormHandoff norm_handoff{&norm_weight, kEps, {&nw}, 1};
  maybe_intervene();
  b.linear_add(dw, act, out, res, c.norm_next ? &norm_handoff : nullptr, &handoff);
  EXPECT_FALSE(handoff.prepared) << "linear_add consumes the hand-off";
  const Tensor handed = to_host_f32(b, res);
  // The next norm's hand-off is consumed before any other linear runs (or after one, intervening).
  Tensor next;
  if (c.norm_next) {
    maybe_intervene();
    next = norm_then_linear(res, &norm_handoff);
    EXPECT_FALSE(norm_handoff.prepared) << "the norm op consumes its hand-off";
  }
  Tensor res_plain = to_device(b, r0);
  b.linear_add(dw, act, out, res_plain, nullptr, nullptr);
  std::vector<Check> checks = {{"act", act_got, act_want, budget},
                               {"residual", handed, res_want, budget},
                               {"residual_as_unhanded", handed, to_host_f32(b, res_plain), kF16Rounded}};
  if (c.norm_next) checks.push_back({"next_as_unhanded", next, norm_then_linear(res_plain, nullptr), budget});
  if (c.intervene) {
    checks.push_back(
        {"intervening_linear", to_host_f32(b, other_y), exl3_reference(down, to_host_f32(b, other_x)), budget});
  }
  return checks;
}

void add_input_handoff_cases(std::vector<OpCase>& cases) {
  // With int8 activations off (these backends' default) no backend hands the input off; the ops
  // still take the InputHandoff and give the plain results (few rows, the cuBLAS path at 129).
  for (Codebook cb : {Codebook::k3Inst, Codebook::kMul1}) {
    for (int64_t m : {1, 3, 129}) {
      for (bool norm_next : {false, true}) {
        const InputHandoffCase c{m, 512, cb, false, norm_next};
        cases.push_back({absl::StrCat("gate_up_input_handoff_", codebook_name(cb), "_m", m, norm_next ? "_norm" : ""),
                         [=](Backend& b, std::mt19937& rng) { return run_input_handoff(b, rng, c, kExl3); }});
      }
    }
    // A linear between the down projection's norm hand-off (CUDA: 2-64 rows) and its norm op.
    const InputHandoffCase c{3, 512, cb, false, true, true};
    cases.push_back({absl::StrCat("gate_up_input_handoff_", codebook_name(cb), "_m3_norm_intervened"),
                     [=](Backend& b, std::mt19937& rng) { return run_input_handoff(b, rng, c, kExl3); }});
  }
}

void add_fused_linear_cases(std::vector<OpCase>& cases) {
  // The norm fused into the matmul's staging on CUDA up to kGemvNormMaxRows (2) rows; 5 rows run
  // the RMSNorm launch first.
  for (Codebook cb : {Codebook::k3Inst, Codebook::kMul1}) {
    for (int64_t m : {1, 2, 5}) {
      for (bool gated : {false, true}) {
        cases.push_back({absl::StrCat(gated ? "norm_gate_up_silu" : "norm_linears", "_K4_", codebook_name(cb), "_m", m),
                         [=](Backend& b, std::mt19937& rng) { return run_norm_linears(b, rng, m, 4, cb, gated); }});
      }
    }
  }
  // Few rows take one fused launch on CUDA (3INST/MCG through the doubled k at m <= 16, MUL1 through
  // its integer codes); 129 rows fall back to the plain composition.
  for (Codebook cb : {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1}) {
    for (int64_t m : {1, 3, 17, 64, 129}) {
      const int bits = m % 2 == 1 ? 4 : 3;
      const std::string tag = absl::StrCat("_K", bits, "_", codebook_name(cb), "_m", m);
      cases.push_back({absl::StrCat("linears", tag),
                       [=](Backend& b, std::mt19937& rng) { return run_fused_linears(b, rng, m, bits, cb); }});
      cases.push_back({absl::StrCat("gate_up_silu", tag),
                       [=](Backend& b, std::mt19937& rng) { return run_gate_up_silu(b, rng, m, bits, cb); }});
      cases.push_back({absl::StrCat("linear_add", tag),
                       [=](Backend& b, std::mt19937& rng) { return run_linear_add(b, rng, m, bits, cb); }});
    }
  }
}

void add_exl3_linear_cases(std::vector<OpCase>& cases) {
  std::vector<Exl3Case> list;
  const int64_t ms[] = {1, 3, 17, 33, 64, 129};
  // Every codebook at K = 2 and 4 over every m; padded inputs and outputs (200 of 256, 300 of 384).
  for (Codebook cb : {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1}) {
    for (int bits : {2, 4}) {
      for (size_t i = 0; i < std::size(ms); ++i) {
        list.push_back({256, 384, 200, 300, bits, cb, ms[i], i % 2 == 1, (i + bits / 2) % 2 == 0});
      }
    }
  }
  // The other K with 3INST, k > n, odd feature counts.
  for (int bits : {1, 3, 5, 6, 7, 8}) {
    for (int64_t m : {1, 17, 129}) list.push_back({384, 256, 257, 129, bits, Codebook::k3Inst, m, m == 17, m != 1});
  }
  // Unpadded, and an empty batch (m = 0 launches nothing).
  for (int64_t m : {0, 1, 33}) list.push_back({128, 128, 128, 128, 4, Codebook::kMcg, m, false, m == 0});
  for (const Exl3Case& c : list) {
    cases.push_back(
        {absl::StrCat("linear_exl3_k", c.k, "_n", c.n, "_in", c.in_features, "_out", c.out_features, "_K", c.bits, "_",
                      codebook_name(c.codebook), "_m", c.m, c.y_f32 ? "_f32" : "_act", c.bias ? "_bias" : ""),
         [=](Backend& b, std::mt19937& rng) { return run_exl3_linear(b, rng, c); }});
  }
}

void add_dense_linear_cases(std::vector<OpCase>& cases) {
  struct Dims {
    int64_t in, out;
  };
  const Dims dims[] = {{33, 17}, {127, 129}, {256, 1000}};
  const int64_t ms[] = {1, 3, 17, 33, 129, 0};
  for (DType w_dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (size_t di = 0; di < std::size(dims); ++di) {
      for (size_t mi = 0; mi < std::size(ms); ++mi) {
        const Dims d = dims[di];
        const int64_t m = ms[mi];
        const bool y_f32 = mi % 2 == 1;
        const bool bias = (mi + di) % 2 == 0;
        cases.push_back({absl::StrCat("linear_dense_", dtype_name(w_dtype), "_in", d.in, "_out", d.out, "_m", m,
                                      y_f32 ? "_f32" : "_act", bias ? "_bias" : ""),
                         [=](Backend& b, std::mt19937& rng) {
                           HostLinear h;
                           h.in_features = d.in;
                           h.out_features = d.out;
                           const float range = 1.0f / std::sqrt(static_cast<float>(d.in));  // keeps |y| ~ 1
                           h.dense = to_dtype(uniform({d.out, d.in}, rng, -range, range), w_dtype);
                           if (bias) h.bias = uniform({d.out}, rng, -1.0f, 1.0f);
                           // CUDA keeps the weight as F16 (the CPU as F32): the reference multiplies by the same
                           // values, transposed to matmul_ref's [in, out].
                           const Tensor w16 =
                               b.device() == Device::kCuda ? rounded(h.dense.to_f32(), DType::kF16) : h.dense.to_f32();
                           Tensor wt = Tensor::zeros(DType::kF32, {d.in, d.out});
                           for (int64_t o = 0; o < d.out; ++o) {
                             for (int64_t i = 0; i < d.in; ++i)
                               wt.mutable_data<float>()[i * d.out + o] = w16.data<float>()[o * d.in + i];
                           }
                           const Tensor x = rounded(normal({m, d.in}, rng), DType::kF16);
                           Tensor want = matmul_ref(x, wt);
                           if (bias) {
                             for (int64_t r = 0; r < m; ++r) {
                               for (int64_t o = 0; o < d.out; ++o)
                                 want.mutable_data<float>()[r * d.out + o] += h.bias.data<float>()[o];
                             }
                           }
                           absl::StatusOr<LinearWeights> w = b.prepare_linear(h, "test.dense_linear");
                           EXL3_CHECK_OK(w.status());
                           if (b.device() == Device::kCuda) {
                             EXPECT_EQ(w->dense.dtype(), DType::kF16);
                           }
                           Tensor y = device_zeros(b, y_f32 ? DType::kF32 : b.activation_dtype(), {m, d.out});
                           b.linear(*w, to_device(b, to_dtype(x, b.activation_dtype())), y);
                           return std::vector<Check>{{"y", to_host_f32(b, y), want, y_f32 ? kDenseF32 : kF16Rounded}};
                         }});
      }
    }
  }
}

// ---- kv_write + attention ----------------------------------------------------------------------

// A full-precision cache over pages [num_pages, page_size, kv_heads, head_dim] (both the same shape).
PagedKv paged_kv(Tensor k_pages, Tensor v_pages) {
  PagedKv c;
  c.page_size = k_pages.dim(1);
  c.kv_heads = k_pages.dim(2);
  c.head_dim = k_pages.dim(3);
  c.k_pages = std::move(k_pages);
  c.v_pages = std::move(v_pages);
  return c;
}

struct SeqSpec {
  int32_t context;  // positions already in the cache (written by an earlier step)
  int32_t fresh;    // tokens of this step, at positions context .. context + fresh - 1
};

struct AttentionCase {
  int64_t heads, kv_heads, head_dim, page_size;
  std::vector<SeqSpec> seqs;
};

// A step of tokens grouped by sequence, in sequence order (the model's layout).
struct HostStep {
  std::vector<int32_t> positions, token_seq;
};

StepMeta device_meta(Backend& b, const HostStep& step, const std::vector<int32_t>& page_table, int64_t num_seqs,
                     int64_t max_pages) {
  StepMeta meta;
  const int64_t n = static_cast<int64_t>(step.positions.size());
  meta.tokens = to_device(b, i32(std::vector<int32_t>(static_cast<size_t>(n), 0)));
  meta.positions = to_device(b, i32(step.positions));
  meta.token_seq = to_device(b, i32(step.token_seq));
  meta.page_table = to_device(b, Tensor::from_vector(page_table, {num_seqs, max_pages}));
  meta.logit_rows = to_device(b, i32(std::vector<int32_t>(static_cast<size_t>(num_seqs), 0)));
  meta.num_tokens = n;
  meta.num_seqs = num_seqs;
  meta.max_pages = max_pages;
  meta.num_logit_rows = num_seqs;
  meta.max_position = step.positions.empty() ? 0 : *std::max_element(step.positions.begin(), step.positions.end());
  return meta;
}

std::vector<Check> run_attention(Backend& b, std::mt19937& rng, const AttentionCase& c) {
  const int64_t num_seqs = static_cast<int64_t>(c.seqs.size());
  // Scattered page tables: every sequence gets pages from a shuffled pool with spares.
  std::vector<int64_t> pages_needed;
  int64_t total_pages = 0, max_pages = 0;
  for (const SeqSpec& s : c.seqs) {
    pages_needed.push_back((s.context + s.fresh + c.page_size - 1) / c.page_size);
    total_pages += pages_needed.back();
    max_pages = std::max(max_pages, pages_needed.back());
  }
  const int64_t num_pages = total_pages + 5;
  std::vector<int32_t> pool(static_cast<size_t>(num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(num_seqs));
  std::vector<int32_t> page_table(static_cast<size_t>(num_seqs * max_pages), 0);
  size_t next = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t p = 0; p < pages_needed[s]; ++p) {
      tables[s].push_back(pool[next++]);
      page_table[s * max_pages + p] = tables[s].back();
    }
  }

  const Shape page_shape{num_pages, c.page_size, c.kv_heads, c.head_dim};
  PagedKv ref_cache = paged_kv(Tensor::zeros(DType::kF32, page_shape), Tensor::zeros(DType::kF32, page_shape));
  PagedKv dev_cache = paged_kv(device_zeros(b, b.kv_dtype(), page_shape), device_zeros(b, b.kv_dtype(), page_shape));
  const DType act = b.activation_dtype();

  // One step: kv_write of every token (both sides); returns the step for attention.
  auto write_step = [&](bool history) {
    HostStep step;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const SeqSpec& spec = c.seqs[s];
      const int32_t begin = history ? 0 : spec.context;
      const int32_t end = history ? spec.context : spec.context + spec.fresh;
      for (int32_t p = begin; p < end; ++p) {
        step.positions.push_back(p);
        step.token_seq.push_back(static_cast<int32_t>(s));
      }
    }
    const int64_t n = static_cast<int64_t>(step.positions.size());
    const Tensor k = rounded(normal({n, c.kv_heads, c.head_dim}, rng), DType::kF16);
    const Tensor v = rounded(normal({n, c.kv_heads, c.head_dim}, rng), DType::kF16);
    for (int64_t s = 0, t = 0; s < num_seqs; ++s) {
      int64_t count = 0;
      while (t + count < n && step.token_seq[t + count] == s) ++count;
      if (count > 0) {
        const std::span<const int32_t> pos(step.positions.data() + t, static_cast<size_t>(count));
        kv_write_ref(ref_cache, tables[s], pos, k.rows(t, count), v.rows(t, count));
      }
      t += count;
    }
    if (n > 0) {
      const StepMeta meta = device_meta(b, step, page_table, num_seqs, max_pages);
      b.kv_write(dev_cache, to_device(b, to_dtype(k, act)), to_device(b, to_dtype(v, act)), meta);
    }
    return step;
  };

  write_step(/*history=*/true);
  const HostStep step = write_step(/*history=*/false);
  const int64_t n = static_cast<int64_t>(step.positions.size());
  const Tensor q = rounded(normal({n, c.heads, c.head_dim}, rng), DType::kF16);
  Tensor want = Tensor::zeros(DType::kF32, {n, c.heads, c.head_dim});
  for (int64_t s = 0, t = 0; s < num_seqs; ++s) {
    const int64_t count = c.seqs[s].fresh;
    const std::span<const int32_t> pos(step.positions.data() + t, static_cast<size_t>(count));
    const Tensor o = attention_ref(q.rows(t, count), ref_cache, tables[s], pos);
    std::copy_n(o.data<float>(), o.numel(), want.mutable_data<float>() + t * c.heads * c.head_dim);
    t += count;
  }
  const StepMeta meta = device_meta(b, step, page_table, num_seqs, max_pages);
  Tensor out = device_zeros(b, act, {n, c.heads, c.head_dim});
  b.attention(to_device(b, to_dtype(q, act)), dev_cache, meta, out);
  return {{"k_pages", to_host_f32(b, dev_cache.k_pages), ref_cache.k_pages, kExact},
          {"v_pages", to_host_f32(b, dev_cache.v_pages), ref_cache.v_pages, kExact},
          {"attention", to_host_f32(b, out), want, kAttention}};
}

// Backend::rope_kv_write: q and k rotated in place, the rotated k and v in their cache slots; a
// step of two sequences over scattered pages (3 tokens at 5..7, 1 token at 40), against rope_ref
// and kv_write_ref of the rotated keys.
std::vector<Check> run_rope_kv_write(Backend& b, std::mt19937& rng, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                     int64_t rotary_dim) {
  constexpr int64_t kPageSize = 16, kNumPages = 9, kMaxPages = 3;
  const std::vector<std::vector<int32_t>> tables = {{4, 7, 1}, {6, 0, 8}};
  std::vector<int32_t> page_table;
  for (const auto& t : tables) page_table.insert(page_table.end(), t.begin(), t.end());
  HostStep step;
  step.positions = {5, 6, 7, 40};
  step.token_seq = {0, 0, 0, 1};
  const int64_t n = 4;
  const Tensor q = rounded(normal({n, heads, head_dim}, rng), DType::kF16);
  const Tensor k = rounded(normal({n, kv_heads, head_dim}, rng), DType::kF16);
  const Tensor v = rounded(normal({n, kv_heads, head_dim}, rng), DType::kF16);
  std::vector<float> inv_freq(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rotary_dim));
  Tensor want_q = q.clone(), want_k = k.clone();
  rope_ref(want_q, step.positions, inv_freq, 1.0f);
  rope_ref(want_k, step.positions, inv_freq, 1.0f);
  const Shape page_shape{kNumPages, kPageSize, kv_heads, head_dim};
  PagedKv ref_cache = paged_kv(Tensor::zeros(DType::kF32, page_shape), Tensor::zeros(DType::kF32, page_shape));
  const std::span<const int32_t> pos0(step.positions.data(), 3), pos1(step.positions.data() + 3, 1);
  kv_write_ref(ref_cache, tables[0], pos0, want_k.rows(0, 3), v.rows(0, 3));
  kv_write_ref(ref_cache, tables[1], pos1, want_k.rows(3, 1), v.rows(3, 1));

  const DType act = b.activation_dtype();
  PagedKv cache = paged_kv(device_zeros(b, b.kv_dtype(), page_shape), device_zeros(b, b.kv_dtype(), page_shape));
  Tensor qd = to_device(b, to_dtype(q, act)), kd = to_device(b, to_dtype(k, act));
  const StepMeta meta = device_meta(b, step, page_table, 2, kMaxPages);
  b.rope_kv_write(qd, kd, to_device(b, to_dtype(v, act)),
                  to_device(b, Tensor::from_vector(inv_freq, {static_cast<int64_t>(inv_freq.size())})), 1.0f, cache,
                  meta);
  return {{"q", to_host_f32(b, qd), want_q, kF16Rounded},
          {"k", to_host_f32(b, kd), want_k, kF16Rounded},
          {"k_pages", to_host_f32(b, cache.k_pages), ref_cache.k_pages, kF16Rounded},
          {"v_pages", to_host_f32(b, cache.v_pages), ref_cache.v_pages, kExact}};
}

// Backend::norm_qkv_rope_kv_write: the layer's RMSNorm of an F32 residual, q/k/v linears of 4 and 2
// heads of 128 (q with a bias), q and k rotated, the rotated k and v in their cache slots; 1 and 2
// tokens (CUDA: one matmul with the norm fused, whose output pass rotates and writes the cache), 5
// and 9 (the RMSNorm launch, then that matmul). Against rms_norm_ref, exl3_linear_ref rounded to
// the activation dtype, rope_ref and kv_write_ref, and exactly against Backend's composition of
// norm_linears and rope_kv_write. With `handoff`, the residual comes from a linear_add that hands
// the norm off (NormHandoff; CUDA, from 3 rows: the output pass stages q/k/v's inputs), and the
// composition agrees within the EXL3 budget (the norm's sum runs in another order).
std::vector<Check> run_norm_qkv_rope_kv_write(Backend& b, std::mt19937& rng, int64_t m, Codebook cb, bool handoff) {
  constexpr float kEps = 1e-5f;
  constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 128, kDim = 256;
  constexpr int64_t kPageSize = 16, kNumPages = 9, kMaxPages = 3;
  const std::vector<std::vector<int32_t>> tables = {{4, 7, 1}, {6, 0, 8}};
  std::vector<int32_t> page_table;
  for (const auto& t : tables) page_table.insert(page_table.end(), t.begin(), t.end());
  // The step's tokens: sequence 0 at 5, 6, ... (one token of 1-2, three of more), then sequence 1 at
  // 40, ... (up to 47: the table's last page)
  HostStep step;
  const int64_t in_seq0 = m <= 2 ? 1 : 3;
  for (int64_t t = 0; t < m; ++t) {
    step.positions.push_back(static_cast<int32_t>(t < in_seq0 ? 5 + t : 40 + t - in_seq0));
    step.token_seq.push_back(t < in_seq0 ? 0 : 1);
  }
  const DType a = b.activation_dtype();
  const Tensor x0 = normal({m, kDim}, rng, 2.0f);
  Tensor x = x0.clone();
  const Tensor xp = rounded(normal({m, 384}, rng), DType::kF16);
  const HostLinear producer = random_exl3_linear(rng, {384, kDim, 384, kDim, 4, cb, m, true, false});
  if (handoff) {
    const Tensor added = exl3_reference(producer, xp);
    for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] += added.data<float>()[i];
  }
  const Tensor weight = uniform({kDim}, rng, 0.5f, 1.5f);
  const Tensor h_want = rounded(rms_norm_ref(x, weight, kEps), a);
  const HostLinear lq =
      random_exl3_linear(rng, {kDim, kHeads * kHeadDim, kDim, kHeads * kHeadDim, 4, cb, m, false, true});
  const HostLinear lk =
      random_exl3_linear(rng, {kDim, kKvHeads * kHeadDim, kDim, kKvHeads * kHeadDim, 4, cb, m, false, false});
  const HostLinear lv =
      random_exl3_linear(rng, {kDim, kKvHeads * kHeadDim, kDim, kKvHeads * kHeadDim, 4, cb, m, false, false});
  Tensor want_q = rounded(exl3_reference(lq, h_want), a).reshape({m, kHeads, kHeadDim});
  Tensor want_k = rounded(exl3_reference(lk, h_want), a).reshape({m, kKvHeads, kHeadDim});
  const Tensor want_v = rounded(exl3_reference(lv, h_want), a).reshape({m, kKvHeads, kHeadDim});
  std::vector<float> inv_freq(kHeadDim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / kHeadDim));
  constexpr float kScaling = 1.25f;
  rope_ref(want_q, step.positions, inv_freq, kScaling);
  rope_ref(want_k, step.positions, inv_freq, kScaling);
  const Shape page_shape{kNumPages, kPageSize, kKvHeads, kHeadDim};
  PagedKv ref_cache = paged_kv(Tensor::zeros(DType::kF32, page_shape), Tensor::zeros(DType::kF32, page_shape));
  for (int64_t t = 0; t < m; ++t) {
    const std::span<const int32_t> pos(step.positions.data() + t, 1);
    kv_write_ref(ref_cache, tables[static_cast<size_t>(step.token_seq[t])], pos, want_k.rows(t, 1), want_v.rows(t, 1));
  }

  const LinearWeights wq = prepared(b, lq), wk = prepared(b, lk), wv = prepared(b, lv);
  const LinearWeights* qkv[] = {&wq, &wk, &wv};
  PagedKv cache = paged_kv(device_zeros(b, b.kv_dtype(), page_shape), device_zeros(b, b.kv_dtype(), page_shape));
  Tensor h = device_zeros(b, a, {m, kDim});
  Tensor q = device_zeros(b, a, {m, kHeads, kHeadDim});
  Tensor k = device_zeros(b, a, {m, kKvHeads, kHeadDim});
  Tensor v = device_zeros(b, a, {m, kKvHeads, kHeadDim});
  const StepMeta meta = device_meta(b, step, page_table, 2, kMaxPages);
  Tensor x_dev = to_device(b, handoff ? x0 : x);
  const Tensor w_dev = to_device(b, weight);
  const Tensor freq_dev = to_device(b, Tensor::from_vector(inv_freq, {static_cast<int64_t>(inv_freq.size())}));
  NormHandoff hf{&w_dev, kEps, {&wq, &wk, &wv}, 3};
  const LinearWeights wp = prepared(b, producer);
  if (handoff) {
    Tensor out = device_zeros(b, DType::kF32, {m, kDim});
    b.linear_add(wp, to_device(b, to_dtype(xp, a)), out, x_dev, &hf, nullptr);
    EXPECT_EQ(hf.prepared, b.device() == Device::kCuda && m >= kGemvHandoffMinRows) << "m " << m;
  }
  b.norm_qkv_rope_kv_write(x_dev, w_dev, kEps, h, qkv, q, k, v, freq_dev, kScaling, cache, meta,
                           handoff ? &hf : nullptr);
  EXPECT_FALSE(hf.prepared);
  // The composition (Backend's own: norm_linears, then rope_kv_write) into fresh buffers: the
  // fused path must give its results bit for bit.
  PagedKv cache2 = paged_kv(device_zeros(b, b.kv_dtype(), page_shape), device_zeros(b, b.kv_dtype(), page_shape));
  Tensor q2 = device_zeros(b, a, {m, kHeads, kHeadDim});
  Tensor k2 = device_zeros(b, a, {m, kKvHeads, kHeadDim});
  Tensor v2 = device_zeros(b, a, {m, kKvHeads, kHeadDim});
  b.Backend::norm_qkv_rope_kv_write(x_dev, w_dev, kEps, h, qkv, q2, k2, v2, freq_dev, kScaling, cache2, meta, nullptr);
  const Budget composed = handoff ? kExl3 : kExact;
  return {{"q", to_host_f32(b, q), want_q, kExl3},
          {"k", to_host_f32(b, k), want_k, kExl3},
          {"v", to_host_f32(b, v), want_v, kExl3},
          {"k_pages", to_host_f32(b, cache.k_pages), ref_cache.k_pages, kExl3},
          {"v_pages", to_host_f32(b, cache.v_pages), ref_cache.v_pages, kExl3},
          {"q_as_composed", to_host_f32(b, q), to_host_f32(b, q2), composed},
          {"k_pages_as_composed", to_host_f32(b, cache.k_pages), to_host_f32(b, cache2.k_pages), composed},
          {"v_pages_as_composed", to_host_f32(b, cache.v_pages), to_host_f32(b, cache2.v_pages), composed}};
}

void add_attention_cases(std::vector<OpCase>& cases) {
  const std::pair<const char*, AttentionCase> list[] = {
      {"prefill", {8, 2, 128, 16, {{0, 17}, {0, 1}, {0, 33}}}},
      {"prefill_long_mqa", {4, 1, 128, 16, {{0, 129}}}},
      {"decode", {32, 8, 128, 16, {{100, 1}, {1, 1}, {1000, 1}, {16, 1}, {33, 1}}}},
      {"decode_mha_hd64", {4, 4, 64, 32, {{129, 1}, {7, 1}, {0, 1}}}},
      {"decode_long_split", {8, 2, 64, 16, {{4000, 1}}}},
      {"chunked_prefill_mixed", {12, 4, 64, 16, {{20, 17}, {0, 3}, {300, 1}, {127, 2}}}},
  };
  for (const auto& [name, c] : list) {
    cases.push_back({absl::StrCat("kv_write_attention_", name, "_h", c.heads, "_kv", c.kv_heads, "_hd", c.head_dim),
                     [c](Backend& b, std::mt19937& rng) { return run_attention(b, rng, c); }});
  }
  for (const auto& [heads, kv, hd, rot] : {std::array<int64_t, 4>{8, 2, 64, 64}, std::array<int64_t, 4>{6, 3, 96, 32},
                                           std::array<int64_t, 4>{32, 8, 128, 128}}) {
    cases.push_back({absl::StrCat("rope_kv_write_h", heads, "_kv", kv, "_hd", hd, "_rot", rot),
                     [=](Backend& b, std::mt19937& rng) { return run_rope_kv_write(b, rng, heads, kv, hd, rot); }});
  }
  for (Codebook cb : {Codebook::k3Inst, Codebook::kMul1}) {
    for (int64_t m : {1, 2, 5, 9}) {
      for (bool handoff : {false, true}) {
        cases.push_back(
            {absl::StrCat(handoff ? "linear_add_handoff_" : "", "norm_qkv_rope_kv_write_K4_", codebook_name(cb), "_m",
                          m),
             [=](Backend& b, std::mt19937& rng) { return run_norm_qkv_rope_kv_write(b, rng, m, cb, handoff); }});
      }
    }
  }
}

std::vector<OpCase> all_cases(Device device) {
  std::vector<OpCase> cases;
  add_embedding_cases(cases);
  add_rms_norm_cases(cases);
  add_add_cases(cases);
  add_silu_mul_cases(cases);
  add_rope_cases(cases);
  add_gather_rows_cases(cases);
  add_exl3_linear_cases(cases);
  add_fused_linear_cases(cases);
  add_norm_handoff_cases(cases);
  add_input_handoff_cases(cases);
  add_dense_linear_cases(cases);
  add_attention_cases(cases);
  for (OpCase& c : cases) c.device = device;
  return cases;
}

// ---- The table, run --------------------------------------------------------------------------

constexpr int64_t kMaxRows = 160;       // >= every m and every step's token count above
constexpr int64_t kMaxFeatures = 4096;  // >= every padded k, n, dense output and heads · head_dim

class BackendOps : public ::testing::TestWithParam<OpCase> {
 protected:
  // One backend of each kind for the whole table, made on first use (so the CPU half runs on a
  // machine without a GPU) and destroyed before the CUDA runtime shuts down.
  static Backend* backend(Device device) {
    std::unique_ptr<Backend>& slot = device == Device::kCuda ? cuda_ : cpu_;
    if (slot == nullptr) {
      if (device == Device::kCpu) {
        slot = make_cpu_backend();
      } else {
        absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(CudaBackendOptions{});
        if (!made.ok()) {
          ADD_FAILURE() << made.status();
          return nullptr;
        }
        slot = std::move(*made);
      }
      std::printf("backend: %s\n", slot->description().c_str());
      EXL3_CHECK_OK(slot->reserve_scratch(kMaxRows, kMaxFeatures));
    }
    return slot.get();
  }
  static void TearDownTestSuite() {
    cuda_.reset();
    cpu_.reset();
  }
  static std::unique_ptr<Backend> cuda_, cpu_;
};
std::unique_ptr<Backend> BackendOps::cuda_;
std::unique_ptr<Backend> BackendOps::cpu_;

TEST_P(BackendOps, MatchesCpuReference) {
  const OpCase& c = GetParam();
  Backend* b = backend(c.device);
  ASSERT_NE(b, nullptr);
  std::mt19937 rng(seed_of(c.name));
  const uint64_t allocated_before = b->allocated_bytes();
  const std::vector<Check> checks = c.run(*b, rng);
  const absl::Status synced = b->synchronize();
  ASSERT_TRUE(synced.ok()) << synced;
  for (const Check& check : checks) {
    const ErrorStats s = measure(check.got, check.want);
    const bool ok = within(s, check.budget);
    std::printf("%-60s %-9s nmse %.3g (budget %.3g) max_abs %.3g at %lld (budget %.3g) ref rms %.3g%s%s\n",
                c.name.c_str(), check.what.c_str(), s.nmse, check.budget.nmse, s.max_abs,
                static_cast<long long>(s.worst), check.budget.max_abs, s.ref_rms, s.nonfinite > 0 ? " NON-FINITE" : "",
                ok ? "" : "  FAIL");
    if (!ok) print_mismatches(check);
    EXPECT_TRUE(ok) << c.name << " " << check.what << ": nmse " << s.nmse << " max_abs " << s.max_abs << ", "
                    << s.nonfinite << " non-finite";
  }
  // Every device tensor of the case was released: the counter is back where it was.
  EXPECT_EQ(b->allocated_bytes(), allocated_before);
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps, ::testing::ValuesIn(all_cases(Device::kCuda)), case_name);
INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::ValuesIn(all_cases(Device::kCpu)), case_name);

// Int8 activations' error budget: ~0.6% relative rms per quantized block of 128 inputs.
constexpr Budget kInt8{3e-4, 0.15};

// A CUDA backend with int8 activations on and the suite's scratch; null (a failure recorded) if
// none can be made.
std::unique_ptr<Backend> int8_cuda_backend() {
  CudaBackendOptions options;
  options.int8_activations = Int8Activations::kOn;
  absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(options);
  if (!made.ok()) {
    ADD_FAILURE() << made.status();
    return nullptr;
  }
  EXL3_CHECK_OK((*made)->reserve_scratch(kMaxRows, kMaxFeatures));
  return std::move(*made);
}

// Prints each check of case `name` and expects it within its budget.
void expect_checks(const std::string& name, const std::vector<Check>& checks) {
  for (const Check& check : checks) {
    const ErrorStats s = measure(check.got, check.want);
    std::printf("%-40s %-20s nmse %.3g max_abs %.3g\n", name.c_str(), check.what.c_str(), s.nmse, s.max_abs);
    EXPECT_TRUE(within(s, check.budget)) << name << " " << check.what << ": nmse " << s.nmse << " max_abs "
                                         << s.max_abs << ", " << s.nonfinite << " non-finite";
  }
}

// The hand-off with int8 activations on (CUDA): the output pass quantizes each consumer's input per
// 128 inputs as their matmul would (kernels/int8_activations.h). Against the same norm op without
// the hand-off and the fp references, within int8's error.
TEST(CudaNormHandoff, Int8ActivationsMatchTheUnfusedPath) {
  const std::unique_ptr<Backend> b = int8_cuda_backend();
  ASSERT_NE(b, nullptr);
  for (int64_t m : {3, 5, 8}) {
    for (int64_t dim : {1024, 4096}) {
      for (bool gated : {false, true}) {
        const std::string name = absl::StrCat("int8_handoff_", gated ? "gate_up" : "linears", "_m", m, "_d", dim);
        std::mt19937 rng(seed_of(name));
        expect_checks(name, run_norm_handoff(*b, rng, {m, dim, Codebook::kMul1, gated}, kInt8));
      }
    }
  }
  ASSERT_TRUE(b->synchronize().ok());
}

// The gated product's input hand-off with int8 activations on (CUDA): the output pass quantizes the
// down projection's input per 128 inputs as its staging would, at 2-4 rows; never at 1 row or from
// 5, where a launch prestages it (kGemvInputHandoffMinRows, ...MaxRows).
TEST(CudaInputHandoff, Int8ActivationsMatchTheUnfusedPath) {
  const std::unique_ptr<Backend> b = int8_cuda_backend();
  ASSERT_NE(b, nullptr);
  for (int64_t m : {1, 2, 3, 4, 5, 8}) {
    for (int64_t width : {1024, 4096}) {
      const std::string name = absl::StrCat("int8_input_handoff_m", m, "_w", width);
      std::mt19937 rng(seed_of(name));
      const std::optional<bool> taken = m >= kGemvInputHandoffMinRows && m <= kGemvInputHandoffMaxRows;
      // From 2 rows the down projection also hands the next norm off (both in one linear_add).
      expect_checks(name, run_input_handoff(*b, rng, {m, width, Codebook::kMul1, taken, m >= 2}, kInt8));
    }
  }
  // A linear between each hand-off and its consumer voids the hand-off; the results stay right.
  for (int64_t m : {2, 3, 4}) {
    const std::string name = absl::StrCat("int8_input_handoff_m", m, "_intervened");
    std::mt19937 rng(seed_of(name));
    expect_checks(name, run_input_handoff(*b, rng, {m, 4096, Codebook::kMul1, true, true, true}, kInt8));
  }
  ASSERT_TRUE(b->synchronize().ok());
}

// ---- Memory, uploads and conversions -------------------------------------------------------------

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(CudaBackendMemory, CapRefusesWithLabelWhatAndShortfallAndCountsExactly) {
  CudaBackendOptions options;
  options.cap_bytes = 3 * kMiB;
  options.cublas_workspace_bytes = kMiB;
  options.label = "rank 1";
  absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(options);
  ASSERT_TRUE(made.ok()) << made.status();
  Backend& b = **made;
  EXPECT_EQ(b.cap_bytes(), 3 * kMiB);
  const uint64_t base = b.allocated_bytes();
  EXPECT_GE(base, kMiB);  // the cuBLAS workspace is counted
  EXPECT_LT(base, kMiB + 4096);

  absl::StatusOr<Tensor> keys = b.allocate(DType::kF16, {256, 1024}, "layer 0 keys");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(b.allocated_bytes(), base + 512 * 1024);
  // Zero-filled.
  const Tensor host = to_host(b, *keys);
  const auto* bits = static_cast<const uint16_t*>(host.raw());
  EXPECT_TRUE(std::all_of(bits, bits + host.numel(), [](uint16_t v) { return v == 0; }));

  absl::StatusOr<Tensor> values = b.allocate(DType::kF32, {1024, 1024}, "layer 1 values");
  ASSERT_FALSE(values.ok());
  EXPECT_EQ(values.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(values.status().message());
  std::printf("refusal: %s\n", message.c_str());
  const uint64_t shortfall = base + 512 * 1024 + 4 * kMiB - 3 * kMiB;
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("layer 1 values"), std::string::npos) << message;
  EXPECT_NE(message.find("short by"), std::string::npos) << message;
  EXPECT_NE(message.find(absl::StrCat("(", shortfall, " bytes)")), std::string::npos) << message;
  EXPECT_NE(message.find(absl::StrCat("(", 4 * kMiB, " bytes)")), std::string::npos) << message;  // its size
  EXPECT_EQ(b.allocated_bytes(), base + 512 * 1024);  // a refusal leaves the count alone

  absl::StatusOr<Tensor> empty = b.allocate(DType::kF32, {0, 7}, "empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->defined());
  EXPECT_EQ(b.allocated_bytes(), base + 512 * 1024);

  // Views keep the allocation alive; the count drops when the last one goes.
  Tensor view = keys->rows(3, 5);
  *keys = Tensor();
  EXPECT_EQ(b.allocated_bytes(), base + 512 * 1024);
  view = Tensor();
  EXPECT_EQ(b.allocated_bytes(), base);

  const DeviceMemoryReport report = device_memory_report(b);
  std::printf("memory: %s\n", report.to_string().c_str());
  EXPECT_EQ(report.backend_bytes, base);
  EXPECT_EQ(report.cap_bytes, 3 * kMiB);
  EXPECT_GT(report.device_total_bytes, 0u);
  EXPECT_LE(report.device_used_bytes, report.device_total_bytes);
  EXPECT_NE(cuda_stream_of(b), nullptr);
}

TEST(CudaBackendMemory, CapBelowTheWorkspaceFailsAtCreation) {
  CudaBackendOptions options;
  options.cap_bytes = kMiB / 2;
  options.cublas_workspace_bytes = kMiB;
  options.label = "rank 3";
  absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(options);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(made.status().message());
  EXPECT_NE(message.find("rank 3"), std::string::npos) << message;
  EXPECT_NE(message.find("cuBLAS workspace"), std::string::npos) << message;
}

TEST(CudaBackendMemory, MissingDeviceIsRefused) {
  CudaBackendOptions options;
  options.device = 1000;
  absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(options);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << made.status();
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(CudaBackendOptions{});
    ASSERT_TRUE(made.ok()) << made.status();
    backend_ = std::move(*made);
  }
  std::unique_ptr<Backend> backend_;
};

TEST_F(CudaBackendTest, ReportsF16ActivationsAndKv) {
  EXPECT_EQ(backend_->device(), Device::kCuda);
  EXPECT_EQ(backend_->activation_dtype(), DType::kF16);
  EXPECT_EQ(backend_->kv_dtype(), DType::kF16);
  EXPECT_NE(backend_->description().find("cuda:0"), std::string::npos) << backend_->description();
}

// Uploads larger than the staging slots and many small ones, with the host buffer overwritten
// right after each upload (the contract lets the caller free it), come back exactly.
TEST_F(CudaBackendTest, StagedUploadsAreExactAndOwnTheirBytes) {
  Backend& b = *backend_;
  std::mt19937 rng(7);
  const int64_t big = 5'000'003;  // 20 MB of F32: spans three 8 MiB slots
  Tensor host = normal({big}, rng);
  const Tensor expected = host.clone();
  Tensor dev = device_zeros(b, DType::kF32, {big});
  b.upload(host, dev);
  std::fill_n(host.mutable_data<float>(), big, -1.0f);
  const Tensor back = to_host(b, dev);
  EXPECT_EQ(std::memcmp(back.raw(), expected.raw(), expected.nbytes()), 0);

  // Small uploads (a step's metadata) interleaved with 400 KB ones: 40 MB in all wraps the 32 MiB
  // staging ring, so slots are reused while earlier copies may still be queued.
  std::vector<Tensor> uploaded;
  std::vector<std::vector<int32_t>> uploaded_values;
  Tensor scratch = Tensor::zeros(DType::kI32, {100'000});
  for (int i = 0; i < 200; ++i) {
    const int64_t n = i % 2 == 0 ? 1 + i % 37 : 100'000;
    std::vector<int32_t> v = random_ints(n, -100000, 100000, rng);
    std::copy(v.begin(), v.end(), scratch.mutable_data<int32_t>());
    uploaded.push_back(device_zeros(b, DType::kI32, {n}));
    b.upload(scratch.rows(0, n), uploaded.back());
    std::fill_n(scratch.mutable_data<int32_t>(), n, 0);
    uploaded_values.push_back(std::move(v));
  }
  for (size_t i = 0; i < uploaded.size(); ++i) {
    const Tensor got = to_host(b, uploaded[i]);
    ASSERT_TRUE(std::equal(uploaded_values[i].begin(), uploaded_values[i].end(), got.data<int32_t>()))
        << "upload " << i;
  }
  ASSERT_TRUE(b.synchronize().ok());
}

// prepare_tensor converts on the device (in 32 MiB chunks) exactly as the host rounds.
TEST_F(CudaBackendTest, PrepareTensorConvertsLikeTheHost) {
  Backend& b = *backend_;
  std::mt19937 rng(11);
  const int64_t n = 9'000'001;  // 36 MB of F32: two conversion chunks
  const Tensor f32 = normal({n}, rng, 100.0f);
  struct Conversion {
    DType from, to;
  };
  for (Conversion c : {Conversion{DType::kF32, DType::kF16}, Conversion{DType::kBF16, DType::kF16},
                       Conversion{DType::kF32, DType::kBF16}, Conversion{DType::kF16, DType::kF32},
                       Conversion{DType::kF16, DType::kF16}}) {
    SCOPED_TRACE(absl::StrCat(dtype_name(c.from), " -> ", dtype_name(c.to)));
    const Tensor src = to_dtype(f32, c.from);
    absl::StatusOr<Tensor> dev = b.prepare_tensor(src, c.to, "test.weight");
    ASSERT_TRUE(dev.ok()) << dev.status();
    ASSERT_EQ(dev->dtype(), c.to);
    const Tensor got = to_host(b, *dev);
    const Tensor want = to_dtype(src.to_f32(), c.to);
    int64_t mismatches = 0;
    const auto* g = static_cast<const uint8_t*>(got.raw());
    const auto* w = static_cast<const uint8_t*>(want.raw());
    const size_t size = dtype_size(c.to);
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(g + i * size, w + i * size, size) == 0) continue;
      if (mismatches < 5) std::printf("  [%lld] differs\n", static_cast<long long>(i));
      ++mismatches;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST_F(CudaBackendTest, WeightsBeyondTheF16RangeAreRefusedByName) {
  Backend& b = *backend_;
  const uint64_t before = b.allocated_bytes();
  std::vector<float> values(15, 0.5f);
  values[7] = 1.0e5f;  // representable in BF16, not in F16
  values[11] = -7.0e4f;
  HostLinear h;
  h.in_features = 5;
  h.out_features = 3;
  h.dense = to_dtype(Tensor::from_vector(values, {3, 5}), DType::kBF16);
  absl::StatusOr<LinearWeights> w = b.prepare_linear(h, "model.layers.0.mlp.down_proj");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(w.status().message());
  std::printf("refusal: %s\n", message.c_str());
  EXPECT_NE(message.find("model.layers.0.mlp.down_proj"), std::string::npos) << message;
  EXPECT_NE(message.find("2 of 15"), std::string::npos) << message;
  EXPECT_NE(message.find("element 7"), std::string::npos) << message;
  EXPECT_EQ(b.allocated_bytes(), before);  // nothing kept from the refused weight

  // F16 and F32 -> F16 are checked too; an in-range weight passes.
  absl::StatusOr<Tensor> f32_over = b.prepare_tensor(Tensor::from_vector(values, {3, 5}), DType::kF16, "norm.weight");
  ASSERT_FALSE(f32_over.ok());
  EXPECT_NE(std::string(f32_over.status().message()).find("norm.weight"), std::string::npos);
  values[7] = 65504.0f;
  values[11] = -65504.0f;
  EXPECT_TRUE(b.prepare_tensor(Tensor::from_vector(values, {3, 5}), DType::kF16, "ok.weight").ok());
}

TEST_F(CudaBackendTest, MalformedExl3LinearIsRefusedByName) {
  HostLinear h;
  h.in_features = 100;
  h.out_features = 200;
  h.is_exl3 = true;
  h.exl3.k = 128;
  h.exl3.n = 128;  // fewer than out_features
  h.exl3.bits = 4;
  h.exl3.trellis = Tensor::zeros(DType::kI16, {8, 8, 64});
  h.exl3.suh = Tensor::zeros(DType::kF16, {128});
  h.exl3.svh = Tensor::zeros(DType::kF16, {128});
  absl::StatusOr<LinearWeights> w = backend_->prepare_linear(h, "model.layers.3.self_attn.o_proj");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(w.status().message()).find("model.layers.3.self_attn.o_proj"), std::string::npos);
}

}  // namespace
}  // namespace exl3
