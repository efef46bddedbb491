// exl3-bench gemv: the EXL3 matmul kernel alone and the whole EXL3 linear, timed in CUDA graphs
// (see gemv_bench.h).
#include "bench/gemv_bench.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_report.h"
#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/fp16.h"
#include "kernels/int8_activations.h"

#ifdef EXL3_HAVE_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "bench/bench_cuda.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_gemv_layout.cuh"
#include "kernels/cuda/exl3_linear.cuh"
#endif

namespace exl3 {

absl::StatusOr<Codebook> parse_codebook_name(const std::string& name) {
  if (name == "mul1") return Codebook::kMul1;
  if (name == "mcg") return Codebook::kMcg;
  if (name == "3inst") return Codebook::k3Inst;
  return absl::InvalidArgumentError(absl::StrCat("--codebooks: unknown codebook '", name, "' (mul1, mcg or 3inst)"));
}

const char* codebook_label(Codebook codebook) {
  switch (codebook) {
    case Codebook::kMul1:
      return "mul1";
    case Codebook::kMcg:
      return "mcg";
    case Codebook::k3Inst:
      return "3inst";
  }
  return "?";
}

absl::StatusOr<std::vector<GemvShape>> parse_gemv_shapes(const std::vector<std::string>& shapes) {
  if (shapes.empty()) return absl::InvalidArgumentError("--shapes needs at least one KxN shape");
  std::vector<GemvShape> out;
  for (const std::string& s : shapes) {
    const std::vector<std::string> parts = absl::StrSplit(s, 'x');
    GemvShape shape;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &shape.k) || !absl::SimpleAtoi(parts[1], &shape.n)) {
      return absl::InvalidArgumentError(absl::StrCat("--shapes: '", s, "' is not KxN (e.g. 8192x28672)"));
    }
    if (shape.k <= 0 || shape.n <= 0 || shape.k % 128 != 0 || shape.n % 128 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shapes: ", s, ": k and n must be positive multiples of 128 (the kernel's tile grid)"));
    }
    if (shape.k > (int64_t{1} << 20) || shape.n > (int64_t{1} << 20) || shape.k * shape.n > (int64_t{1} << 34)) {
      return absl::InvalidArgumentError(absl::StrCat("--shapes: ", s, " is too large (k·n at most 2^34)"));
    }
    out.push_back(shape);
  }
  return out;
}

absl::Status validate_gemv_options(const GemvBenchOptions& o) {
  if (o.bits.empty()) return absl::InvalidArgumentError("--bits needs at least one K");
  for (int b : o.bits) {
    if (b < 1 || b > 8) return absl::InvalidArgumentError(absl::StrCat("--bits: ", b, " is outside 1..8"));
  }
  if (o.codebooks.empty()) return absl::InvalidArgumentError("--codebooks needs at least one codebook");
  for (const std::string& c : o.codebooks) {
    if (absl::StatusOr<Codebook> cb = parse_codebook_name(c); !cb.ok()) return cb.status();
  }
  if (absl::StatusOr<std::vector<GemvShape>> shapes = parse_gemv_shapes(o.shapes); !shapes.ok()) {
    return shapes.status();
  }
  if (o.rows.empty()) return absl::InvalidArgumentError("--rows needs at least one row count");
  for (int64_t r : o.rows) {
    if (r < 1 || r > 4096) return absl::InvalidArgumentError(absl::StrCat("--rows: ", r, " is outside 1..4096"));
  }
  if (o.iters < 1) return absl::InvalidArgumentError("--iters must be at least 1");
  if (o.repeats < 1) return absl::InvalidArgumentError("--repeats must be at least 1");
  if (o.linear_bits < 0 || o.linear_bits > 8) {
    return absl::InvalidArgumentError(absl::StrCat("--linear-bits: ", o.linear_bits, " is outside 0..8"));
  }
  if (o.device < 0) return absl::InvalidArgumentError("--device must not be negative");
  if (o.copy_bytes == 0) return absl::InvalidArgumentError("copy peak buffer must not be empty");
  return absl::OkStatus();
}

namespace {

// The 16-column strip `tile_col` of a host trellis as its own trellis I16 [k/16, 1, 16·bits].
Tensor trellis_strip(const Tensor& trellis, int64_t tile_col) {
  const int64_t tiles_k = trellis.dim(0), tiles_n = trellis.dim(1), len = trellis.dim(2);
  Tensor strip = Tensor::zeros(DType::kI16, {tiles_k, 1, len});
  const int16_t* src = trellis.data<int16_t>();
  int16_t* dst = strip.mutable_data<int16_t>();
  for (int64_t tk = 0; tk < tiles_k; ++tk) {
    std::memcpy(dst + tk * len, src + (tk * tiles_n + tile_col) * len, static_cast<size_t>(len) * sizeof(int16_t));
  }
  return strip;
}

}  // namespace

GemvCheck check_gemm_against_reference(const Tensor& trellis, int bits, Codebook codebook, const Tensor& a,
                                       const Tensor& c, int64_t rows) {
  EXL3_CHECK(trellis.on_host() && trellis.dtype() == DType::kI16 && trellis.rank() == 3 &&
                 trellis.dim(2) == 16 * int64_t{bits},
             "check: trellis ", shape_string(trellis.shape()), " for K=", bits);
  const int64_t k = trellis.dim(0) * 16, n = trellis.dim(1) * 16, tiles_n = trellis.dim(1);
  EXL3_CHECK(rows >= 1 && a.on_host() && a.dtype() == DType::kF16 && a.numel() >= rows * k, "check: A ",
             shape_string(a.shape()), " for ", rows, " rows of ", k);
  EXL3_CHECK(c.on_host() && c.dtype() == DType::kF32 && c.numel() >= rows * n, "check: C ", shape_string(c.shape()),
             " for ", rows, " rows of ", n);
  GemvCheck check;
  check.k = k;
  check.n = n;
  check.rows = rows;
  check.bits = bits;
  check.codebook = codebook_label(codebook);
  const auto* a_bits = static_cast<const uint16_t*>(a.raw());
  std::vector<double> a_values(static_cast<size_t>(rows * k));
  for (size_t i = 0; i < a_values.size(); ++i) a_values[i] = half_bits_to_float(a_bits[i]);
  const float* got = c.data<float>();
  double sum_sq = 0.0;
  int64_t count = 0;
  constexpr int64_t kStrips = 8;
  std::vector<int64_t> strips;
  for (int64_t s = 0; s < kStrips; ++s) strips.push_back(s * (tiles_n - 1) / (kStrips - 1));
  strips.erase(std::unique(strips.begin(), strips.end()), strips.end());
  std::vector<double> w_values(static_cast<size_t>(16 * k));  // [16 columns, k]
  for (int64_t tn : strips) {
    const Tensor wq = exl3_decode_ref(trellis_strip(trellis, tn), bits, codebook);  // F16 [k, 16]
    const auto* w = static_cast<const uint16_t*>(wq.raw());
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < 16; ++j) w_values[static_cast<size_t>(j * k + i)] = half_bits_to_float(w[i * 16 + j]);
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < 16; ++j) {
        double ref = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          ref += a_values[static_cast<size_t>(r * k + i)] * w_values[static_cast<size_t>(j * k + i)];
        }
        const double diff = std::abs(static_cast<double>(got[r * n + tn * 16 + j]) - ref);
        check.max_abs_error = std::isnan(diff) ? INFINITY : std::max(check.max_abs_error, diff);
        sum_sq += ref * ref;
        ++count;
      }
    }
  }
  check.columns = static_cast<int64_t>(strips.size()) * 16;
  check.ref_rms = count > 0 ? std::sqrt(sum_sq / static_cast<double>(count)) : 0.0;
  return check;
}

namespace {

#ifdef EXL3_HAVE_CUDA

// Random 32-bit words (splitmix64): every pattern is a valid trellis (exl3-format.md §4.2).
void fill_random_words(void* dst, size_t bytes, uint64_t seed) {
  uint64_t state = seed;
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < bytes; i += 8) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out + i, &z, std::min<size_t>(8, bytes - i));
  }
}

// A host trellis I16 [k/16, n/16, 16·bits] of random words.
Tensor random_trellis(int64_t k, int64_t n, int bits, uint64_t seed) {
  Tensor t = Tensor::zeros(DType::kI16, {k / 16, n / 16, 16 * static_cast<int64_t>(bits)});
  fill_random_words(t.mutable_raw(), t.nbytes(), seed);
  return t;
}

// Host F16 [rows, cols] with values ~N(0, 1).
Tensor normal_halves(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor t = Tensor::zeros(DType::kF16, {rows, cols});
  auto* h = static_cast<uint16_t*>(t.mutable_raw());
  for (int64_t i = 0; i < t.numel(); ++i) h[i] = float_to_half_bits(dist(rng));
  return t;
}

// Host F16 [count] of random sign and magnitude in [0.5, 1.5) (suh / svh of the linear rows).
Tensor random_scales(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  Tensor t = Tensor::zeros(DType::kF16, {count});
  auto* h = static_cast<uint16_t*>(t.mutable_raw());
  for (int64_t i = 0; i < count; ++i) h[i] = float_to_half_bits((rng() & 1u) ? -mag(rng) : mag(rng));
  return t;
}

// Start and end events, destroyed on every path.
struct EventPair {
  cudaEvent_t begin = nullptr, end = nullptr;
  EventPair() = default;
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    if (begin != nullptr) cudaEventDestroy(begin);
    if (end != nullptr) cudaEventDestroy(end);
  }
};

// Per-launch times of one captured graph.
struct GraphTime {
  double mean_us = 0.0, min_us = 0.0;
};

// The int8 GEMV's rows (exl3_gemv_int8.cu).
constexpr int64_t kInt8LinearMaxRows = gemv::kInt8MaxGroups * gemv::kInt8GroupRows;

class GemvRunner {
 public:
  GemvRunner(const GemvBenchOptions& o, std::FILE* progress) : o_(o), progress_(progress) {}

  absl::Status init(GemvBenchReport& report) {
    CudaBackendOptions options;
    options.device = o_.device;
    absl::StatusOr<std::unique_ptr<Backend>> backend = make_cuda_backend(options);
    if (!backend.ok()) return backend.status();
    backend_ = std::move(*backend);
    stream_ = cuda_stream_of(*backend_);
    if (absl::Status st = cuda_status(cudaEventCreate(&events_.begin), "cudaEventCreate"); !st.ok()) return st;
    if (absl::Status st = cuda_status(cudaEventCreate(&events_.end), "cudaEventCreate"); !st.ok()) return st;
    int l2 = 0;
    if (absl::Status st = cuda_status(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, o_.device), "L2 size");
        !st.ok()) {
      return st;
    }
    l2_bytes_ = std::max(l2, 1 << 20);
    report.device_description = backend_->description();
    report.l2_bytes = l2;
    return absl::OkStatus();
  }

  // launch_exl3_gemm on every (bits, codebook, rows) of a 4096x4096 matrix, once, against the
  // CPU reference.
  absl::Status check(std::vector<GemvCheck>& out) {
    constexpr int64_t kSize = 4096;
    const int64_t max_rows = *std::max_element(o_.rows.begin(), o_.rows.end());
    const Tensor a_host = normal_halves(max_rows, kSize, o_.seed + 101);
    absl::StatusOr<Tensor> a = upload(a_host, "check A");
    if (!a.ok()) return a.status();
    for (int bits : o_.bits) {
      const Tensor trellis_host = random_trellis(kSize, kSize, bits, o_.seed + 200 + static_cast<uint64_t>(bits));
      absl::StatusOr<Tensor> trellis = upload(trellis_host, "check trellis");
      if (!trellis.ok()) return trellis.status();
      for (const std::string& name : o_.codebooks) {
        const Codebook cb = *parse_codebook_name(name);
        for (int64_t rows : o_.rows) {
          absl::StatusOr<Tensor> c = backend_->allocate(DType::kF32, {rows, kSize}, "check C");
          if (!c.ok()) return c.status();
          launch_exl3_gemm(params(*a, *trellis, *c, rows, kSize, kSize, bits, cb), stream_);
          Tensor c_host = Tensor::zeros(DType::kF32, {rows, kSize});
          backend_->download(*c, c_host);
          if (absl::Status st = backend_->synchronize(); !st.ok()) return st;
          const GemvCheck check = check_gemm_against_reference(trellis_host, bits, cb, a_host, c_host, rows);
          log(absl::StrFormat("gemv check %lldx%lld K=%d %s rows %lld: max |err| %.3g, %.3g of the reference RMS %s",
                              static_cast<long long>(kSize), static_cast<long long>(kSize), bits, name,
                              static_cast<long long>(rows), check.max_abs_error, check.max_rel_error(),
                              check.max_rel_error() <= kGemvCheckTolerance ? "(ok)" : "(FAILED)"));
          out.push_back(check);
        }
      }
    }
    return absl::OkStatus();
  }

  // The kernel alone on every (shape, bits, codebook, rows).
  absl::Status time_kernel(const GemvShape& shape, std::vector<GemvTiming>& out) {
    const int64_t max_rows = *std::max_element(o_.rows.begin(), o_.rows.end());
    absl::StatusOr<Tensor> a = upload(normal_halves(max_rows, shape.k, o_.seed + 1), "gemv A");
    if (!a.ok()) return a.status();
    absl::StatusOr<Tensor> c = backend_->allocate(DType::kF32, {max_rows, shape.n}, "gemv C");
    if (!c.ok()) return c.status();
    for (int bits : o_.bits) {
      const Tensor host = random_trellis(shape.k, shape.n, bits, o_.seed + 10 + static_cast<uint64_t>(bits));
      const int buffers = buffer_count(static_cast<double>(host.nbytes()));
      // One allocation holds every rotated copy, each at a 256-byte aligned offset. The copies hold
      // the same words: what keeps a launch from hitting L2 is the address, not the content.
      const int64_t stride = (static_cast<int64_t>(host.nbytes()) + 255) / 256 * 256;
      absl::StatusOr<Tensor> block = backend_->allocate(DType::kU8, {stride * buffers}, "gemv trellis buffers");
      if (!block.ok()) return block.status();
      for (int b = 0; b < buffers; ++b) {
        Tensor dst = block->view_bytes(stride * b, DType::kI16, host.shape());
        backend_->upload(host, dst);
      }
      if (o_.int8 && std::find(o_.codebooks.begin(), o_.codebooks.end(), "mul1") != o_.codebooks.end()) {
        if (absl::Status st = time_mul1_linears(shape, bits, *block, stride, buffers, *a, out); !st.ok()) return st;
      }
      for (const std::string& name : o_.codebooks) {
        const Codebook cb = *parse_codebook_name(name);
        for (int64_t rows : o_.rows) {
          const int launches = launch_count(buffers);
          const auto* base = static_cast<const unsigned char*>(block->raw());
          absl::StatusOr<GraphTime> t = time_graph(launches, [&](int i) {
            Exl3GemmParams p = params(*a, *block, *c, rows, shape.k, shape.n, bits, cb);
            p.trellis = reinterpret_cast<const int16_t*>(base + stride * (i % buffers));
            launch_exl3_gemm(p, stream_);
          });
          if (!t.ok()) return t.status();
          out.push_back(timing("gemm", shape, rows, bits, name, *t, launches, buffers));
        }
      }
    }
    return absl::OkStatus();
  }

  // The whole MUL1 linear (launch_exl3_linear: the few-rows path's input staging, GEMV and output
  // pass) with fp16 activations ('linear-f16', up to kGemvMaxRows rows) and int8 ('linear-int8', up
  // to the int8 kernel's 32 rows, whatever kInt8ActivationsMaxRows lets the backends use) on the
  // rotated trellis copies. x is the kernel rows' A, used as the linear's input; scratch_a has room
  // for either path's prestaged input.
  absl::Status time_mul1_linears(const GemvShape& shape, int bits, const Tensor& block, int64_t stride, int buffers,
                                 const Tensor& x, std::vector<GemvTiming>& out) {
    const int64_t max_rows = std::min<int64_t>(x.dim(0), kGemvMaxRows);
    absl::StatusOr<Tensor> suh = upload(random_scales(shape.k, o_.seed + 3), "linear suh");
    if (!suh.ok()) return suh.status();
    absl::StatusOr<Tensor> svh = upload(random_scales(shape.n, o_.seed + 4), "linear svh");
    if (!svh.ok()) return svh.status();
    absl::StatusOr<Tensor> y = backend_->allocate(DType::kF16, {max_rows, shape.n}, "linear y");
    if (!y.ok()) return y.status();
    const int64_t scratch_floats = (shape.k / 128) * max_rows * shape.n;  // one partial per slice at most
    absl::StatusOr<Tensor> scratch = backend_->allocate(DType::kF32, {scratch_floats}, "linear scratch");
    if (!scratch.ok()) return scratch.status();
    const int64_t scratch_a_halves = 4 * max_rows * shape.k;
    absl::StatusOr<Tensor> scratch_a = backend_->allocate(DType::kF16, {scratch_a_halves}, "linear scratch_a");
    if (!scratch_a.ok()) return scratch_a.status();
    const auto* base = static_cast<const unsigned char*>(block.raw());
    for (const bool int8 : {false, true}) {
      for (int64_t rows : o_.rows) {
        if (rows > (int8 ? std::min(max_rows, kInt8LinearMaxRows) : max_rows)) continue;
        const int launches = launch_count(buffers);
        absl::StatusOr<GraphTime> t = time_graph(launches, [&](int i) {
          Exl3LinearParams p;
          p.x = static_cast<const __half*>(x.raw());
          p.m = rows;
          p.in_features = shape.k;
          p.out_features = shape.n;
          p.trellis = reinterpret_cast<const int16_t*>(base + stride * (i % buffers));
          p.suh = static_cast<const __half*>(suh->raw());
          p.svh = static_cast<const __half*>(svh->raw());
          p.k = shape.k;
          p.n = shape.n;
          p.bits = bits;
          p.codebook = Codebook::kMul1;
          p.y = y->mutable_raw();
          p.scratch_a = static_cast<__half*>(scratch_a->mutable_raw());
          p.scratch_a_halves = scratch_a_halves;
          p.scratch_c = static_cast<float*>(scratch->mutable_raw());
          p.scratch_c_floats = scratch_floats;
          p.int8_activations = int8;
          launch_exl3_linear(p, stream_);
        });
        if (!t.ok()) return t.status();
        out.push_back(timing(int8 ? "linear-int8" : "linear-f16", shape, rows, bits, "mul1", *t, launches, buffers));
      }
    }
    return absl::OkStatus();
  }

  // Backend::linear (input transform, GEMM, output transform) at 1 row and K = linear_bits.
  absl::Status time_linear(const GemvShape& shape, std::vector<GemvTiming>& out) {
    const int bits = o_.linear_bits;
    if (absl::Status st = backend_->reserve_scratch(1, std::max(shape.k, shape.n)); !st.ok()) return st;
    absl::StatusOr<Tensor> x = upload(normal_halves(1, shape.k, o_.seed + 2), "linear x");
    if (!x.ok()) return x.status();
    absl::StatusOr<Tensor> y = backend_->allocate(DType::kF16, {1, shape.n}, "linear y");
    if (!y.ok()) return y.status();
    for (const std::string& name : o_.codebooks) {
      HostLinear h;
      h.in_features = shape.k;
      h.out_features = shape.n;
      h.is_exl3 = true;
      h.exl3.k = shape.k;
      h.exl3.n = shape.n;
      h.exl3.bits = bits;
      h.exl3.codebook = *parse_codebook_name(name);
      h.exl3.trellis = random_trellis(shape.k, shape.n, bits, o_.seed + 20 + static_cast<uint64_t>(bits));
      h.exl3.suh = random_scales(shape.k, o_.seed + 3);
      h.exl3.svh = random_scales(shape.n, o_.seed + 4);
      const int buffers = buffer_count(static_cast<double>(h.exl3.trellis.nbytes()));
      std::vector<LinearWeights> weights;
      for (int b = 0; b < buffers; ++b) {
        absl::StatusOr<LinearWeights> w = backend_->prepare_linear(h, "gemv bench linear");
        if (!w.ok()) return w.status();
        weights.push_back(std::move(*w));
      }
      const int launches = launch_count(buffers);
      absl::StatusOr<GraphTime> t =
          time_graph(launches, [&](int i) { backend_->linear(weights[static_cast<size_t>(i % buffers)], *x, *y); });
      if (!t.ok()) return t.status();
      out.push_back(timing("linear", shape, 1, bits, name, *t, launches, buffers));
    }
    return absl::OkStatus();
  }

 private:
  static Exl3GemmParams params(const Tensor& a, const Tensor& trellis, Tensor& c, int64_t rows, int64_t k, int64_t n,
                               int bits, Codebook cb) {
    Exl3GemmParams p;
    p.a = static_cast<const __half*>(a.raw());
    p.trellis = static_cast<const int16_t*>(trellis.raw());
    p.c = static_cast<float*>(c.mutable_raw());
    p.m = rows;
    p.k = k;
    p.n = n;
    p.bits = bits;
    p.codebook = cb;
    return p;
  }

  absl::StatusOr<Tensor> upload(const Tensor& host, const std::string& what) {
    absl::StatusOr<Tensor> t = backend_->allocate(host.dtype(), host.shape(), what);
    if (!t.ok()) return t.status();
    backend_->upload(host, *t);
    return t;
  }

  // Trellis buffers a graph rotates over: enough that together they are at least twice the L2
  // cache, so no launch finds its trellis still in L2 from an earlier one (a 70B-sized matrix,
  // 8192x28672 at K >= 2, is more than 50 MB alone and needs one). At most 1024 (tiny shapes).
  int buffer_count(double trellis_bytes) const {
    const double needed = std::ceil(2.0 * static_cast<double>(l2_bytes_) / trellis_bytes);
    return static_cast<int>(std::clamp(needed, 1.0, 1024.0));
  }

  // Launches per graph: at least --iters, a whole number of rotations over the buffers.
  int launch_count(int buffers) const {
    const int at_least = std::max(o_.iters, buffers);
    return (at_least + buffers - 1) / buffers * buffers;
  }

  // After one uncaptured launch, captures `launches` calls of launch(i) into one graph on the
  // backend's stream, replays it once to warm up, then times `repeats` replays with events; per-launch mean and min.
  template <typename Launch>
  absl::StatusOr<GraphTime> time_graph(int launches, Launch launch) {
    launch(0);  // outside the capture: the kernel's module is loaded before it is recorded
    if (absl::Status st = backend_->synchronize(); !st.ok()) return st;
    absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend_->capture_step([&]() {
      for (int i = 0; i < launches; ++i) launch(i);
      return absl::OkStatus();
    });
    if (!graph.ok()) return graph.status();
    if (absl::Status st = backend_->replay_step(**graph); !st.ok()) return st;
    GraphTime t;
    double total = 0.0;
    for (int r = 0; r < o_.repeats; ++r) {
      if (absl::Status st = cuda_status(cudaEventRecord(events_.begin, stream_), "cudaEventRecord"); !st.ok()) {
        return st;
      }
      if (absl::Status st = backend_->replay_step(**graph); !st.ok()) return st;
      if (absl::Status st = cuda_status(cudaEventRecord(events_.end, stream_), "cudaEventRecord"); !st.ok()) return st;
      if (absl::Status st = cuda_status(cudaEventSynchronize(events_.end), "cudaEventSynchronize"); !st.ok()) {
        return st;
      }
      float ms = 0.0f;
      if (absl::Status st = cuda_status(cudaEventElapsedTime(&ms, events_.begin, events_.end), "cudaEventElapsedTime");
          !st.ok()) {
        return st;
      }
      const double us = std::max(static_cast<double>(ms) * 1e3 / launches, 1e-3);
      total += us;
      t.min_us = r == 0 ? us : std::min(t.min_us, us);
    }
    t.mean_us = total / o_.repeats;
    if (absl::Status st = backend_->synchronize(); !st.ok()) return st;
    return t;
  }

  GemvTiming timing(const std::string& kind, const GemvShape& shape, int64_t rows, int bits, const std::string& cb,
                    const GraphTime& t, int launches, int buffers) {
    GemvTiming g;
    g.kind = kind;
    g.k = shape.k;
    g.n = shape.n;
    g.rows = rows;
    g.bits = bits;
    g.codebook = cb;
    g.us = t.mean_us;
    g.min_us = t.min_us;
    g.launches = launches;
    g.buffers = buffers;
    log(absl::StrFormat("gemv %s %lldx%lld K=%d %s rows %lld: %.2f µs (min %.2f), %.2f G weights/ms, %.0f GB/s", kind,
                        static_cast<long long>(g.k), static_cast<long long>(g.n), bits, cb,
                        static_cast<long long>(rows), g.us, g.min_us, g.g_weights_per_ms(), g.trellis_gb_per_s()));
    return g;
  }

  void log(const std::string& line) {
    if (progress_ == nullptr) return;
    std::fprintf(progress_, "%s\n", line.c_str());
    std::fflush(progress_);
  }

  const GemvBenchOptions& o_;
  std::FILE* progress_;
  std::unique_ptr<Backend> backend_;
  cudaStream_t stream_ = nullptr;
  EventPair events_;
  int l2_bytes_ = 0;
};

#endif  // EXL3_HAVE_CUDA

}  // namespace

absl::StatusOr<GemvBenchReport> run_gemv_bench(const GemvBenchOptions& o, std::FILE* progress) {
  if (absl::Status st = validate_gemv_options(o); !st.ok()) return st;
#ifdef EXL3_HAVE_CUDA
  const std::vector<GemvShape> shapes = *parse_gemv_shapes(o.shapes);
  GemvBenchReport report;
  absl::StatusOr<MeasuredPeaks> peaks = measure_cuda_peaks(o.device, o.copy_bytes, 4096, 10);
  if (!peaks.ok()) return peaks.status();
  report.peaks = *peaks;
  GemvRunner runner(o, progress);
  if (absl::Status st = runner.init(report); !st.ok()) return st;
  if (o.check) {
    if (absl::Status st = runner.check(report.checks); !st.ok()) return st;
  }
  for (const GemvShape& shape : shapes) {
    if (absl::Status st = runner.time_kernel(shape, report.timings); !st.ok()) return st;
    if (o.linear_bits > 0) {
      if (absl::Status st = runner.time_linear(shape, report.timings); !st.ok()) return st;
    }
  }
  return report;
#else
  static_cast<void>(progress);
  return absl::UnimplementedError(
      "exl3-bench gemv times the CUDA EXL3 kernel and needs a CUDA build; this exl3-bench was built without CUDA "
      "(configure with -DEXL3_CUDA=ON)");
#endif
}

namespace {

// The gemm row of the same shape, K, codebook and 1 row as a linear row, if timed.
const GemvTiming* matching_gemm(const GemvBenchReport& r, const GemvTiming& linear) {
  for (const GemvTiming& t : r.timings) {
    if (t.kind == "gemm" && t.k == linear.k && t.n == linear.n && t.bits == linear.bits &&
        t.codebook == linear.codebook && t.rows == linear.rows) {
      return &t;
    }
  }
  return nullptr;
}

std::string timing_description(const GemvBenchOptions& o) {
  return absl::StrFormat(
      "each row: a CUDA graph of at least %d back-to-back launches rotating over trellis buffers totalling at least "
      "twice the L2 cache, one warm-up replay, then %d replays timed with CUDA events; per-launch mean (and min)",
      o.iters, o.repeats);
}

}  // namespace

nlohmann::json gemv_bench_json(const GemvBenchOptions& o, const GemvBenchReport& r) {
  const double limit = r.weight_limit_4bpw_per_ms();
  nlohmann::json rows = nlohmann::json::array();
  for (const GemvTiming& t : r.timings) {
    nlohmann::json row = {{"kind", t.kind},
                          {"k", t.k},
                          {"n", t.n},
                          {"rows", t.rows},
                          {"bits", t.bits},
                          {"codebook", t.codebook},
                          {"us", t.us},
                          {"min_us", t.min_us},
                          {"launches_per_graph", t.launches},
                          {"trellis_buffers", t.buffers},
                          {"trellis_bytes", t.trellis_bytes()},
                          {"g_weights_per_ms", t.g_weights_per_ms()},
                          {"trellis_gb_per_s", t.trellis_gb_per_s()},
                          {"copy_peak_fraction", t.trellis_gb_per_s() / r.peaks.copy_gb_per_s},
                          {"weight_limit_4bpw_fraction", t.g_weights_per_ms() * 1e9 / limit}};
    if (t.kind == "linear") {
      const GemvTiming* gemm = matching_gemm(r, t);
      row["transform_overhead_us"] = gemm != nullptr ? nlohmann::json(t.us - gemm->us) : nlohmann::json(nullptr);
    }
    rows.push_back(std::move(row));
  }
  nlohmann::json checks = nlohmann::json::array();
  for (const GemvCheck& c : r.checks) {
    checks.push_back({{"k", c.k},
                      {"n", c.n},
                      {"rows", c.rows},
                      {"bits", c.bits},
                      {"codebook", c.codebook},
                      {"columns", c.columns},
                      {"max_abs_error", c.max_abs_error},
                      {"reference_rms", c.ref_rms},
                      {"max_rel_error", c.max_rel_error()},
                      {"tolerance", kGemvCheckTolerance},
                      {"ok", c.max_rel_error() <= kGemvCheckTolerance}});
  }
  return {{"mode", "gemv"},
          {"environment", capture_environment("cuda", o.device, o.argv)},
          {"device", {{"index", o.device}, {"description", r.device_description}, {"l2_bytes", r.l2_bytes}}},
          {"timing",
           {{"method", "graph"}, {"description", timing_description(o)}, {"iters", o.iters}, {"repeats", o.repeats}}},
          {"bits", o.bits},
          {"codebooks", o.codebooks},
          {"shapes", o.shapes},
          {"rows", o.rows},
          {"linear_bits", o.linear_bits},
          {"peaks",
           {{"copy_gb_per_s", r.peaks.copy_gb_per_s},
            {"copy_bytes", r.peaks.copy_bytes},
            {"weight_limit_4bpw_g_per_ms", limit / 1e9}}},
          {"timings", rows},
          {"checks", checks}};
}

std::string gemv_bench_markdown(const GemvBenchOptions& o, const GemvBenchReport& r) {
  const double limit = r.weight_limit_4bpw_per_ms();
  std::string md = absl::StrFormat("### exl3-bench gemv on %s\n\n", r.device_description);
  absl::StrAppendFormat(&md,
                        "Copy peak %.1f GB/s (read + write of %.0f MiB); 4 bpw weights streamed at that rate: %.2f G "
                        "weights/ms. L2 %.0f MiB. Timing: %s.\n\n",
                        r.peaks.copy_gb_per_s, static_cast<double>(r.peaks.copy_bytes) / (1 << 20), limit / 1e9,
                        static_cast<double>(r.l2_bytes) / (1 << 20), timing_description(o));
  md +=
      "| kernel | k x n | K | codebook | rows | µs | min µs | G weights/ms | trellis GB/s | % copy peak "
      "| % 4 bpw limit |\n";
  md += "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const GemvTiming& t : r.timings) {
    std::string kind = t.kind;
    if (t.kind == "linear") {
      const GemvTiming* gemm = matching_gemm(r, t);
      kind = gemm != nullptr ? absl::StrFormat("linear (%+.2f µs)", t.us - gemm->us) : "linear";
    }
    absl::StrAppendFormat(&md, "| %s | %lldx%lld | %d | %s | %lld | %.2f | %.2f | %.2f | %.0f | %.1f | %.1f |\n", kind,
                          static_cast<long long>(t.k), static_cast<long long>(t.n), t.bits, t.codebook,
                          static_cast<long long>(t.rows), t.us, t.min_us, t.g_weights_per_ms(), t.trellis_gb_per_s(),
                          100.0 * t.trellis_gb_per_s() / r.peaks.copy_gb_per_s,
                          100.0 * t.g_weights_per_ms() * 1e9 / limit);
  }
  md +=
      "\ngemm: launch_exl3_gemm alone (A fp16 ~N(0,1), C fp32, random trellis words); linear: Backend::linear, "
      "input and output Hadamard transforms included (+ the time over the gemm row); linear-f16 / linear-int8: the "
      "whole MUL1 linear (launch_exl3_linear) with fp16 or int8 activations, its input staging and output pass "
      "included.\n";
  if (!r.checks.empty()) {
    double worst = 0.0;
    int failed = 0;
    for (const GemvCheck& c : r.checks) {
      worst = std::max(worst, c.max_rel_error());
      if (c.max_rel_error() > kGemvCheckTolerance) ++failed;
    }
    absl::StrAppendFormat(&md,
                          "\nCheck against exl3_decode_ref on %lldx%lld, %lld output columns per row, %d combinations: "
                          "worst max |err| / reference RMS %.3g (tolerance %.0e), %d failed.\n",
                          static_cast<long long>(r.checks.front().k), static_cast<long long>(r.checks.front().n),
                          static_cast<long long>(r.checks.front().columns), static_cast<int>(r.checks.size()), worst,
                          kGemvCheckTolerance, failed);
  }
  return md;
}

absl::Status run_gemv_bench_command(const GemvBenchOptions& o, std::FILE* out, std::FILE* progress) {
  absl::StatusOr<GemvBenchReport> report = run_gemv_bench(o, progress);
  if (!report.ok()) return report.status();
  const std::string md = gemv_bench_markdown(o, *report);
  if (out != nullptr) std::fputs(md.c_str(), out);
  if (!o.json_path.empty()) {
    if (absl::Status st = write_report_file(o.json_path, gemv_bench_json(o, *report).dump(2) + "\n"); !st.ok()) {
      return st;
    }
  }
  if (!o.markdown_path.empty()) {
    if (absl::Status st = write_report_file(o.markdown_path, md); !st.ok()) return st;
  }
  for (const GemvCheck& c : report->checks) {
    if (!(c.max_rel_error() <= kGemvCheckTolerance)) {
      return absl::InternalError(absl::StrFormat(
          "the timed kernel is wrong: %lldx%lld K=%d %s rows %lld is off the CPU reference by %.3g of its RMS "
          "(tolerance %.0e)",
          static_cast<long long>(c.k), static_cast<long long>(c.n), c.bits, c.codebook, static_cast<long long>(c.rows),
          c.max_rel_error(), kGemvCheckTolerance));
    }
  }
  return absl::OkStatus();
}

void add_gemv_subcommand(CLI::App& app, GemvBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "gemv",
      "Time the EXL3 matmul kernel alone (launch_exl3_gemm: CUDA-core GEMV for 1-4 rows, tensor cores above) on "
      "random trellis, per K, codebook, k x n shape and row count, in CUDA graphs; plus the whole linear through "
      "the CUDA backend at 1 row. Needs a CUDA build.");
  cmd->add_option("--bits", o.bits, "K values, comma-separated, 1..8")
      ->delimiter(',')
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  cmd->add_option("--codebooks", o.codebooks, "Codebooks, comma-separated: mul1, mcg, 3inst")
      ->delimiter(',')
      ->check(CLI::IsMember({"mul1", "mcg", "3inst"}))
      ->capture_default_str();
  cmd->add_option("--shapes", o.shapes,
                  "Matrices k x n (inputs x outputs, multiples of 128), comma-separated (default: Llama-3.1-70B's "
                  "gate/up and down)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--rows", o.rows, "Row counts m of A, comma-separated, 1..4096")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--iters", o.iters, "Launches per graph (at least; rounded up to whole rotations over the buffers)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Timed replays of each graph (mean and min reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--device", o.device, "CUDA device index")->check(CLI::Range(0, 1023))->capture_default_str();
  cmd->add_option("--linear-bits", o.linear_bits,
                  "K of the whole-linear rows (Backend::linear, 1 row, every shape and codebook); 0: none")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  cmd->add_flag("--check,!--no-check", o.check,
                "Check the kernel against the CPU reference on 4096x4096 for every K, codebook and row count first");
  cmd->add_flag(
      "--int8,!--no-int8", o.int8,
      "Also time the whole MUL1 linear at every row count, with fp16 activations (rows 'linear-f16', up to 64 "
      "rows) and int8 (rows 'linear-int8', up to 32 rows; "
      "kernels/int8_activations.h)");
  cmd->add_option("--seed", o.seed, "Seed of the random trellis and activations")->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write the results as JSON here");
  cmd->add_option("--markdown", o.markdown_path, "Write the markdown table here");
  cmd->callback([&o]() {
    if (absl::Status st = run_gemv_bench_command(o, stdout, stderr); !st.ok()) {
      std::fprintf(stderr, "exl3-bench gemv: error: %s\n", st.ToString().c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace exl3
