// GPU tests of the long-prefill EXL3 linear (kernels/cuda/exl3_decode_gemm.h: original-basis decode
// + cuBLAS on the raw input) against exl3_linear_ref: called directly with a small staging (many
// column slabs, partial in/out features, rows < k decoded, bias, F16/F32 outputs, every codebook),
// on layer 0 of the 4.0 bpw fixture against ExLlamaV3's y_forward_reconstruct, and through the CUDA
// backend's linear on both sides of kDecodeGemmMinRows and across two 64 MiB slabs; plus a timing
// printout (no assertion) of the backend's linear at prefill sizes beside a plain fp16 cuBLAS GEMM.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/backend_tensors.h"
#include "common/cuda_test_util.h"
#include "common/fixture_linear.h"
#include "common/exl3_gpu_layers.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dense_linear.h"
#include "kernels/cuda/exl3_decode_gemm.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

using testing::DeviceBuffer;
using testing::half_tensor;

// Against exl3_linear_ref (fp32 throughout): W rounded once to fp16 (~2e-4 relative RMS per weight,
// so ~2e-4 of RMS(y) per output) plus, for F16 outputs, one output rounding (~2e-4): expected
// relative RMS ~3e-4, bound 1e-3; every element within 1e-2 · RMS(reference) (5σ of the weight
// rounding is 1e-3 · RMS, half an fp16 ulp of an output of 5 · RMS is 2.4e-3 · RMS).
constexpr double kLinearRelRms = 1e-3;
constexpr double kLinearMaxAbsRel = 1e-2;
// ExLlamaV3's reconstruct path and x @ weight_reconstructed vs ours on the fixture: exl3_decode_
// original_test.cpp measures 1.25e-3 / 1.31e-3 for the reference weight in double; the GPU adds
// fp32 accumulation order only.
constexpr double kFixtureTolerance = 3e-3;

constexpr Codebook kCodebooks[] = {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1};

class Exl3DecodeGemmGpuTest : public testing::CudaTest {};

// A layer in host memory plus the call's logical sizes and bias.
struct HostCase {
  Exl3Weight w;  // host tensors
  int64_t in_features = 0, out_features = 0;
  std::vector<float> bias;  // empty: none
};

HostCase random_case(int64_t k, int64_t n, int64_t in, int64_t out, int bits, Codebook cb, bool bias, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  HostCase c;
  c.w.k = k;
  c.w.n = n;
  c.w.bits = bits;
  c.w.codebook = cb;
  std::vector<int16_t> words(static_cast<size_t>(k / 16 * (n / 16) * 16 * bits));
  for (int16_t& v : words) v = static_cast<int16_t>(rng() & 0xFFFFu);
  c.w.trellis = Tensor::from_vector(words, {k / 16, n / 16, 16 * bits});
  // suh ~ 1/sqrt(in) keeps the outputs O(1).
  const float inv_sqrt_in = 1.0f / std::sqrt(static_cast<float>(in));
  std::vector<uint16_t> suh(static_cast<size_t>(k)), svh(static_cast<size_t>(n));
  for (uint16_t& h : suh) h = float_to_half_bits(((rng() & 1u) ? -scale(rng) : scale(rng)) * inv_sqrt_in);
  for (uint16_t& h : svh) h = float_to_half_bits((rng() & 1u) ? -scale(rng) : scale(rng));
  c.w.suh = half_tensor(suh, {k});
  c.w.svh = half_tensor(svh, {n});
  c.in_features = in;
  c.out_features = out;
  if (bias) {
    std::uniform_real_distribution<float> b(-1.0f, 1.0f);
    c.bias.resize(static_cast<size_t>(out));
    for (float& v : c.bias) v = b(rng);
  }
  return c;
}

std::vector<uint16_t> normal_halves(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (uint16_t& h : out) h = float_to_half_bits(dist(rng));
  return out;
}

// exl3_linear_ref of the given rows of x (fp16 bits [m, in_features], zero-padded to k), the first
// out_features outputs, plus bias: [rows.size(), out_features].
std::vector<float> reference_rows(const HostCase& c, const std::vector<uint16_t>& x, const std::vector<int64_t>& rows) {
  const int64_t k = c.w.k, n = c.w.n, in = c.in_features, out = c.out_features;
  const auto count = static_cast<int64_t>(rows.size());
  Tensor xf = Tensor::zeros(DType::kF32, {count, k});
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      xf.mutable_data<float>()[r * k + i] = half_bits_to_float(x[static_cast<size_t>(rows[r] * in + i)]);
    }
  }
  const Tensor y = exl3_linear_ref(c.w, xf);
  std::vector<float> want(static_cast<size_t>(count * out));
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      want[static_cast<size_t>(r * out + j)] = y.data<float>()[r * n + j] + (c.bias.empty() ? 0.0f : c.bias[j]);
    }
  }
  return want;
}

std::vector<int64_t> all_rows(int64_t m) {
  std::vector<int64_t> rows(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) rows[static_cast<size_t>(r)] = r;
  return rows;
}

// got vs want ([rows, cols]): relative RMS and every element within kLinearMaxAbsRel · RMS(want);
// prints the first mismatches and a summary line.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int64_t cols,
                  const std::string& label) {
  ASSERT_EQ(got.size(), want.size()) << label;
  double ref_sq = 0.0;
  for (float v : want) ref_sq += double{v} * v;
  const double ref_rms = std::sqrt(ref_sq / static_cast<double>(std::max<size_t>(want.size(), 1)));
  const double bound = kLinearMaxAbsRel * ref_rms;
  double err_sq = 0.0, max_abs = 0.0;
  int64_t over = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    err_sq += std::isnan(err) ? INFINITY : err * err;
    max_abs = std::max(max_abs, std::isnan(err) ? INFINITY : err);
    if (!(err <= bound)) {
      if (over < 5) {
        std::printf("  %s: mismatch at row %lld col %lld: gpu %.7g ref %.7g (|err| %.3g > %.3g)\n", label.c_str(),
                    static_cast<long long>(static_cast<int64_t>(i) / cols),
                    static_cast<long long>(static_cast<int64_t>(i) % cols), got[i], want[i], err, bound);
      }
      ++over;
    }
  }
  const double rel_rms = std::sqrt(err_sq / std::max(ref_sq, 1e-300));
  std::printf("%s: max |err| %.3g (bound %.3g), rel RMS %.3g (bound %.3g), RMS(ref) %.3g, %lld over bound\n",
              label.c_str(), max_abs, bound, rel_rms, kLinearRelRms, ref_rms, static_cast<long long>(over));
  EXPECT_EQ(over, 0) << label;
  EXPECT_LE(rel_rms, kLinearRelRms) << label;
}

// ---- launch_exl3_decode_gemm directly --------------------------------------------------------------

struct DirectCall {
  int64_t m = 0;
  bool y_f32 = false;
  uint64_t staging_bytes = 0;
};

// Runs launch_exl3_decode_gemm on the default stream with its own cuBLAS handle; returns y as floats
// and checks the guard bytes after y.
std::vector<float> run_direct(const HostCase& c, const std::vector<uint16_t>& x, const DirectCall& call) {
  constexpr size_t kGuardBytes = 256;
  constexpr uint8_t kSentinel = 0xA5;
  const int64_t m = call.m;
  const size_t y_count = static_cast<size_t>(m * c.out_features);
  const size_t y_bytes = y_count * (call.y_f32 ? sizeof(float) : sizeof(uint16_t));
  DeviceBuffer<int16_t> trellis(static_cast<size_t>(c.w.trellis.numel()));
  DeviceBuffer<__half> suh(static_cast<size_t>(c.w.k)), svh(static_cast<size_t>(c.w.n));
  trellis.upload(c.w.trellis.raw());
  suh.upload(c.w.suh.raw());
  svh.upload(c.w.svh.raw());
  DeviceBuffer<__half> d_x(x.size());
  d_x.upload(x.data(), x.size());
  DeviceBuffer<float> bias(std::max<size_t>(c.bias.size(), 1));
  if (!c.bias.empty()) bias.upload(c.bias.data(), c.bias.size());
  DeviceBuffer<float> scratch_c(y_count);
  DeviceBuffer<uint8_t> y(y_bytes + kGuardBytes);
  EXL3_CUDA_CHECK(cudaMemset(y.get(), kSentinel, y_bytes + kGuardBytes));
  DeviceBuffer<uint8_t> staging(call.staging_bytes);
  cublasHandle_t handle = nullptr;
  EXL3_CUBLAS_CHECK(cublasCreate(&handle));

  Exl3LinearParams p;
  p.x = d_x.get();
  p.m = m;
  p.in_features = c.in_features;
  p.out_features = c.out_features;
  p.trellis = trellis.get();
  p.suh = suh.get();
  p.svh = svh.get();
  p.bias = c.bias.empty() ? nullptr : bias.get();
  p.k = c.w.k;
  p.n = c.w.n;
  p.bits = c.w.bits;
  p.codebook = c.w.codebook;
  p.y = y.get();
  p.y_f32 = call.y_f32;
  p.scratch_c = scratch_c.get();
  p.scratch_c_floats = static_cast<int64_t>(y_count);
  launch_exl3_decode_gemm(p, {handle, reinterpret_cast<__half*>(staging.get()), call.staging_bytes}, nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  EXL3_CUBLAS_CHECK(cublasDestroy(handle));

  std::vector<uint8_t> raw(y_bytes + kGuardBytes);
  y.download(raw.data(), raw.size());
  const auto guard_damage = std::count_if(raw.begin() + static_cast<std::ptrdiff_t>(y_bytes), raw.end(),
                                          [](uint8_t b) { return b != kSentinel; });
  EXPECT_EQ(guard_damage, 0) << "bytes written past y [" << m << ", " << c.out_features << "]";
  std::vector<float> out(y_count);
  for (size_t i = 0; i < y_count; ++i) {
    if (call.y_f32) {
      std::memcpy(&out[i], raw.data() + 4 * i, sizeof(float));
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, sizeof(h));
      out[i] = half_bits_to_float(h);
    }
  }
  return out;
}

std::string case_label(const HostCase& c, const DirectCall& call) {
  return "k=" + std::to_string(c.w.k) + " n=" + std::to_string(c.w.n) + " in=" + std::to_string(c.in_features) +
         " out=" + std::to_string(c.out_features) + " K=" + std::to_string(c.w.bits) + " cb " +
         std::to_string(static_cast<int>(c.w.codebook)) + " m=" + std::to_string(call.m) +
         (call.y_f32 ? " f32" : " f16") + (c.bias.empty() ? "" : " bias") + " staging " +
         std::to_string(call.staging_bytes);
}

void check_direct(const HostCase& c, const DirectCall& call, uint32_t x_seed) {
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(call.m * c.in_features), x_seed);
  const std::vector<float> got = run_direct(c, x, call);
  expect_close(got, reference_rows(c, x, all_rows(call.m)), c.out_features, case_label(c, call));
}

TEST_F(Exl3DecodeGemmGpuTest, ManyColumnSlabsWithPartialFeaturesBiasAndBothOutputs) {
  // k 640, n 896, 600 of 640 inputs, 833 of 896 outputs; a staging of 640 x 256 halves (+ spare bytes)
  // gives slabs of 256, 256, 256 and 128 columns, the last one 65 columns wide in y.
  const uint64_t staging = 640 * 256 * 2 + 1000;
  const HostCase plain = random_case(640, 896, 600, 833, 3, Codebook::kMcg, false, 11);
  const HostCase biased = random_case(640, 896, 600, 833, 3, Codebook::kMcg, true, 12);
  check_direct(plain, {1, false, staging}, 13);
  check_direct(biased, {7, true, staging}, 14);
  check_direct(biased, {300, false, staging}, 15);
  check_direct(plain, {300, true, staging}, 16);
}

TEST_F(Exl3DecodeGemmGpuTest, FewerInputRowsDecodedThanPadded) {
  // 257 of k = 512 inputs: only 3 of the 4 row blocks are decoded; 128-column slabs.
  const HostCase c = random_case(512, 384, 257, 300, 5, Codebook::k3Inst, true, 21);
  check_direct(c, {33, false, 384 * 128 * 2}, 22);
  // One input feature, 129 of 256 outputs, one slab.
  const HostCase narrow = random_case(128, 256, 1, 129, 6, Codebook::kMul1, false, 23);
  check_direct(narrow, {40, true, uint64_t{1} << 20}, 24);
}

TEST_F(Exl3DecodeGemmGpuTest, EveryCodebookAtSeveralBits) {
  uint32_t seed = 30;
  for (Codebook cb : kCodebooks) {
    for (int bits : {1, 2, 4, 5, 8}) {
      const HostCase c = random_case(256, 384, 256, 384, bits, cb, false, seed++);
      check_direct(c, {65, false, uint64_t{1} << 20}, seed++);
    }
  }
}

class Exl3DecodeGemmFixtureTest : public Exl3DecodeGemmGpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(Exl3DecodeGemmFixtureTest, MatchesExllamaReconstructForward) {
  testing::FixtureLinear f;
  ASSERT_NO_FATAL_FAILURE(
      testing::load_fixture_linear(GetParam(), {"x", "y_forward_reconstruct", "y_x_matmul_w_fp32"}, f));
  const Tensor* x = &f.dump["x"];
  const Tensor* y_reconstruct = &f.dump["y_forward_reconstruct"];
  const Tensor* y_matmul = &f.dump["y_x_matmul_w_fp32"];
  HostCase c;
  c.w = f.weight;
  c.in_features = c.w.k;
  c.out_features = c.w.n;
  ASSERT_EQ(x->dim(1), c.w.k);
  const int64_t m = x->dim(0);
  std::vector<uint16_t> x_half(static_cast<size_t>(x->numel()));
  for (size_t i = 0; i < x_half.size(); ++i) x_half[i] = float_to_half_bits(x->data<float>()[i]);

  const std::vector<float> got = run_direct(c, x_half, {m, true, uint64_t{64} << 20});
  const Tensor want_reconstruct = y_reconstruct->to_f32();
  const Tensor want_matmul = y_matmul->to_f32();
  double err_reconstruct = 0.0, err_matmul = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = std::isnan(got[i]) ? INFINITY : got[i];
    err_reconstruct = std::max(err_reconstruct, std::fabs(g - want_reconstruct.data<float>()[i]));
    err_matmul = std::max(err_matmul, std::fabs(g - want_matmul.data<float>()[i]));
  }
  std::printf("%s: max |y - y_forward_reconstruct| = %.3g, max |y - x@weight_reconstructed| = %.3g (bound %.3g)\n",
              GetParam().c_str(), err_reconstruct, err_matmul, kFixtureTolerance);
  EXPECT_LE(err_reconstruct, kFixtureTolerance);
  EXPECT_LE(err_matmul, kFixtureTolerance);
  expect_close(got, reference_rows(c, x_half, all_rows(m)), c.out_features, GetParam() + " vs exl3_linear_ref");
}

INSTANTIATE_TEST_SUITE_P(Layer0, Exl3DecodeGemmFixtureTest, ::testing::Values("self_attn.q_proj", "mlp.down_proj"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "self_attn.q_proj" ? std::string("QProj") : std::string("DownProj");
                         });

// ---- Through the CUDA backend's linear --------------------------------------------------------------

std::unique_ptr<Backend> cuda_backend(int64_t max_rows, int64_t max_features) {
  absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(CudaBackendOptions{});
  EXL3_CHECK_OK(made.status());
  EXL3_CHECK_OK((*made)->reserve_scratch(max_rows, max_features));
  return *std::move(made);
}

HostLinear host_linear(const HostCase& c) {
  HostLinear h;
  h.in_features = c.in_features;
  h.out_features = c.out_features;
  h.is_exl3 = true;
  h.exl3 = c.w;
  if (!c.bias.empty()) h.bias = Tensor::from_vector(c.bias, {c.out_features});
  return h;
}

// Backend::linear of m rows of x; returns y as floats [m, out_features].
std::vector<float> backend_linear(Backend& b, const LinearWeights& w, const std::vector<uint16_t>& x, int64_t m,
                                  bool y_f32) {
  // The first m rows of x (half_tensor copies the whole vector it is given).
  const std::vector<uint16_t> rows(x.begin(), x.begin() + m * w.in_features);
  const Tensor x_dev = testing::to_device(b, half_tensor(rows, {m, w.in_features}));
  Tensor y = testing::device_zeros(b, y_f32 ? DType::kF32 : DType::kF16, {m, w.out_features});
  b.linear(w, x_dev, y);
  const absl::Status synced = b.synchronize();
  EXPECT_TRUE(synced.ok()) << synced;
  const Tensor host = testing::to_host(b, y).to_f32();
  return std::vector<float>(host.data<float>(), host.data<float>() + host.numel());
}

TEST_F(Exl3DecodeGemmGpuTest, BackendLinearOnBothSidesOfTheThreshold) {
  const int64_t m_max = kDecodeGemmMinRows + 77;
  std::unique_ptr<Backend> b = cuda_backend(m_max, 1152);
  const HostCase c = random_case(1024, 1152, 1000, 1100, 4, Codebook::kMul1, true, 41);
  absl::StatusOr<LinearWeights> w = b->prepare_linear(host_linear(c), "test.decode_gemm");
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(m_max * c.in_features), 42);
  const std::vector<float> want_all = reference_rows(c, x, all_rows(m_max));
  for (const int64_t m : {kDecodeGemmMinRows - 1, kDecodeGemmMinRows, m_max}) {
    for (const bool y_f32 : {false, true}) {
      const std::vector<float> got = backend_linear(*b, *w, x, m, y_f32);
      const std::vector<float> want(want_all.begin(), want_all.begin() + m * c.out_features);
      expect_close(got, want, c.out_features,
                   "backend linear m=" + std::to_string(m) + (y_f32 ? " f32" : " f16") +
                       (m >= kDecodeGemmMinRows ? " (decode + GEMM)" : " (inner-basis path)"));
    }
  }
}

TEST_F(Exl3DecodeGemmGpuTest, BackendLinearAcrossTwoStagingSlabs) {
  // 4096 x 8320 halves (68 MB) exceed the 64 MiB staging: two slabs of 4224 and 4096 columns, the
  // second 4076 columns wide in y. The reference covers 5 of the 300 rows (rows are independent).
  constexpr int64_t kM = 300;
  std::unique_ptr<Backend> b = cuda_backend(kM, 8320);
  const HostCase c = random_case(4096, 8320, 4096, 8300, 4, Codebook::k3Inst, false, 51);
  absl::StatusOr<LinearWeights> w = b->prepare_linear(host_linear(c), "test.decode_gemm_slabs");
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(kM * c.in_features), 52);
  const std::vector<float> y = backend_linear(*b, *w, x, kM, false);
  const std::vector<int64_t> rows = {0, 1, 150, 298, 299};
  std::vector<float> got;
  for (int64_t r : rows) got.insert(got.end(), y.begin() + r * c.out_features, y.begin() + (r + 1) * c.out_features);
  expect_close(got, reference_rows(c, x, rows), c.out_features,
               "backend linear 4096x8320 m=300 (rows 0 1 150 298 299)");
}

// ---- Timing (printout only) ------------------------------------------------------------------------

// The 8B MLP shape (k 4096, n 14336, K=4 MUL1, F16 output) through the backend's linear at prefill
// sizes (below kDecodeGemmMinRows the inner-basis path), beside one plain fp16 cuBLAS GEMM of the
// same size on an fp16 weight (the tensor-core rate the linear is judged against).
TEST_F(Exl3DecodeGemmGpuTest, TimingPrintout) {
  constexpr int64_t kK = 4096;
  constexpr int64_t kN = 14336;
  constexpr int64_t kMaxM = 2048;
  constexpr int kWarmup = 2;
  constexpr int kIters = 10;
  std::unique_ptr<Backend> b = cuda_backend(kMaxM, kN);
  const HostCase c = random_case(kK, kN, kK, kN, 4, Codebook::kMul1, false, 61);
  absl::StatusOr<LinearWeights> w = b->prepare_linear(host_linear(c), "test.decode_gemm_timing");
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint16_t> x = normal_halves(static_cast<size_t>(kMaxM * kK), 62);
  const Tensor x_dev = testing::to_device(*b, half_tensor(x, {kMaxM, kK}));
  cudaStream_t stream = cuda_stream_of(*b);

  DeviceBuffer<__half> dense_w(static_cast<size_t>(kK * kN));
  EXL3_CUDA_CHECK(cudaMemset(dense_w.get(), 0x20, static_cast<size_t>(kK * kN) * sizeof(__half)));  // 0x2020 = 0.0081
  DeviceBuffer<__half> dense_y(static_cast<size_t>(kMaxM * kN));
  cublasHandle_t handle = nullptr;
  EXL3_CUBLAS_CHECK(cublasCreate(&handle));
  EXL3_CUBLAS_CHECK(cublasSetStream(handle, stream));

  cudaEvent_t start, stop;
  EXL3_CUDA_CHECK(cudaEventCreate(&start));
  EXL3_CUDA_CHECK(cudaEventCreate(&stop));
  const auto time_us = [&](const auto& launch) {
    for (int i = 0; i < kWarmup; ++i) launch();
    EXL3_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kIters; ++i) launch();
    EXL3_CUDA_CHECK(cudaEventRecord(stop, stream));
    EXL3_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    EXL3_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return 1e3 * ms / kIters;
  };
  for (const int64_t m :
       {int64_t{128}, kDecodeGemmMinRows - 1, kDecodeGemmMinRows, int64_t{512}, int64_t{1024}, kMaxM}) {
    const Tensor x_m = x_dev.rows(0, m);
    Tensor y = testing::device_zeros(*b, DType::kF16, {m, kN});
    const double linear_us = time_us([&] { b->linear(*w, x_m, y); });
    const float alpha = 1.0f, beta = 0.0f;
    const double gemm_us = time_us([&] {
      EXL3_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(kN), static_cast<int>(m),
                                     static_cast<int>(kK), &alpha, dense_w.get(), CUDA_R_16F, static_cast<int>(kN),
                                     x_m.raw(), CUDA_R_16F, static_cast<int>(kK), &beta, dense_y.get(), CUDA_R_16F,
                                     static_cast<int>(kN), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    const double flop = 2.0 * static_cast<double>(m) * kK * kN;
    std::printf(
        "timing linear %lldx%lld K=4 mul1 m=%lld (%s): %.1f us, %.0f TFLOP/s; fp16 GEMM alone %.1f us, "
        "%.0f TFLOP/s; linear at %.0f%% of the GEMM rate\n",
        static_cast<long long>(kK), static_cast<long long>(kN), static_cast<long long>(m),
        m >= kDecodeGemmMinRows ? "decode + GEMM" : "inner-basis path", linear_us, flop / linear_us / 1e6, gemm_us,
        flop / gemm_us / 1e6, 100.0 * gemm_us / linear_us);
  }
  EXL3_CUDA_CHECK(cudaEventDestroy(start));
  EXL3_CUDA_CHECK(cudaEventDestroy(stop));
  EXL3_CUBLAS_CHECK(cublasDestroy(handle));
  EXL3_CHECK_OK(b->synchronize());
}

}  // namespace
}  // namespace exl3
