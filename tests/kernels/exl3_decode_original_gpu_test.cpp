// GPU tests of the decode into the original basis (kernels/cuda/exl3_decode_original.cuh) against
// its CPU reference exl3_decode_original_ref, bit for bit (the kernel does the reference's fp32
// operations in the reference's order): random layers for every K and codebook, sub-ranges of
// 128-blocks at offsets with a padded output stride, ExLlamaV3's weight_reconstructed on layer 0 of
// the 4.0 bpw fixture; plus a timing printout (no assertion) beside the inner-basis decode.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/exl3_gpu_layers.h"
#include "common/fixture_linear.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_decode.cuh"
#include "kernels/cuda/exl3_decode_original.cuh"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "kernels/ref/exl3_decode_original_ref.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

using testing::DeviceBuffer;

constexpr Codebook kCodebooks[] = {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1};
// ExLlamaV3's get_weight_tensor() rounds to fp16 after each step; the reference once at the end:
// 6.1e-5 apart at most on both layers (exl3_decode_original_test.cpp holds the reference to 1e-4).
constexpr double kWeightTolerance = 1e-4;
constexpr uint16_t kSentinel = 0x7E00;  // an fp16 NaN: never a decoded value

class Exl3DecodeOriginalGpuTest : public testing::CudaTest {};

Tensor half_tensor(const std::vector<uint16_t>& bits) {
  Tensor t = Tensor::zeros(DType::kF16, {static_cast<int64_t>(bits.size())});
  std::memcpy(t.mutable_raw(), bits.data(), bits.size() * sizeof(uint16_t));
  return t;
}

Exl3Weight random_weight(int64_t k, int64_t n, int bits, Codebook codebook, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  Exl3Weight w;
  w.k = k;
  w.n = n;
  w.bits = bits;
  w.codebook = codebook;
  std::vector<int16_t> words(static_cast<size_t>(k / 16 * (n / 16) * 16 * bits));
  for (int16_t& v : words) v = static_cast<int16_t>(rng() & 0xFFFFu);
  w.trellis = Tensor::from_vector(words, {k / 16, n / 16, 16 * bits});
  std::vector<uint16_t> suh(static_cast<size_t>(k)), svh(static_cast<size_t>(n));
  for (uint16_t& h : suh) h = float_to_half_bits((rng() & 1u) ? -scale(rng) : scale(rng));
  for (uint16_t& h : svh) h = float_to_half_bits((rng() & 1u) ? -scale(rng) : scale(rng));
  w.suh = half_tensor(suh);
  w.svh = half_tensor(svh);
  return w;
}

struct DeviceWeight {
  explicit DeviceWeight(const Exl3Weight& w)
      : trellis(static_cast<size_t>(w.trellis.numel())), suh(static_cast<size_t>(w.k)), svh(static_cast<size_t>(w.n)) {
    trellis.upload(w.trellis.raw());
    suh.upload(w.suh.raw());
    svh.upload(w.svh.raw());
  }
  DeviceBuffer<int16_t> trellis;
  DeviceBuffer<__half> suh;
  DeviceBuffer<__half> svh;
};

struct Range {
  int64_t row0, rows, col0, cols, ld;
};

// Decodes `r` of `w` on the GPU into a sentinel-filled [rows, ld] buffer; returns its fp16 bits.
std::vector<uint16_t> gpu_decode(const Exl3Weight& w, const DeviceWeight& d, const Range& r) {
  const size_t count = static_cast<size_t>(r.rows * r.ld);
  std::vector<uint16_t> out(count, kSentinel);
  DeviceBuffer<__half> d_out(count);
  d_out.upload(out.data(), count);
  Exl3DecodeOriginalParams p;
  p.trellis = d.trellis.get();
  p.suh = d.suh.get();
  p.svh = d.svh.get();
  p.out = d_out.get();
  p.k = w.k;
  p.n = w.n;
  p.row0 = r.row0;
  p.rows = r.rows;
  p.col0 = r.col0;
  p.cols = r.cols;
  p.ld = r.ld;
  p.bits = w.bits;
  p.codebook = w.codebook;
  launch_exl3_decode_original(p, nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  d_out.download(out.data(), count);
  return out;
}

// The GPU range against the same range of the reference (bit for bit) and the stride's padding
// against the sentinel; prints the first mismatches.
void expect_range_matches(const std::vector<uint16_t>& got, const Tensor& want, int64_t n, const Range& r,
                          const std::string& label) {
  const auto* ref = static_cast<const uint16_t*>(want.raw());
  int64_t mismatches = 0, padding_damage = 0;
  for (int64_t i = 0; i < r.rows; ++i) {
    for (int64_t j = 0; j < r.ld; ++j) {
      const uint16_t g = got[static_cast<size_t>(i * r.ld + j)];
      if (j >= r.cols) {
        padding_damage += g != kSentinel;
        continue;
      }
      const uint16_t e = ref[(r.row0 + i) * n + r.col0 + j];
      if (g == e) continue;
      if (mismatches < 5) {
        std::printf("  %s: W[%lld][%lld]: gpu 0x%04X (%.8g) ref 0x%04X (%.8g)\n", label.c_str(),
                    static_cast<long long>(r.row0 + i), static_cast<long long>(r.col0 + j), g, half_bits_to_float(g), e,
                    half_bits_to_float(e));
      }
      ++mismatches;
    }
  }
  std::printf("%s: %lld of %lld values differ from the reference, %lld padding values written\n", label.c_str(),
              static_cast<long long>(mismatches), static_cast<long long>(r.rows * r.cols),
              static_cast<long long>(padding_damage));
  EXPECT_EQ(mismatches, 0) << label;
  EXPECT_EQ(padding_damage, 0) << label;
}

TEST_F(Exl3DecodeOriginalGpuTest, MatchesReferenceForEveryBitsAndCodebook) {
  // k = 256, n = 384: 2 x 3 blocks (an odd count of column blocks).
  uint32_t seed = 500;
  for (int bits = 1; bits <= 8; ++bits) {
    for (Codebook cb : kCodebooks) {
      const Exl3Weight w = random_weight(256, 384, bits, cb, seed++);
      const DeviceWeight d(w);
      const Range all{0, w.k, 0, w.n, w.n};
      const std::string label = "bits " + std::to_string(bits) + " codebook " + std::to_string(static_cast<int>(cb));
      expect_range_matches(gpu_decode(w, d, all), exl3_decode_original_ref(w), w.n, all, label);
    }
  }
}

TEST_F(Exl3DecodeOriginalGpuTest, SubRangesAtOffsetsWithPaddedStride) {
  // k = 640, n = 896: 5 x 7 blocks; ranges as the long-prefill linear cuts them (whole rows of one
  // column slab) and others, written with ld > cols.
  const struct {
    int bits;
    Codebook cb;
  } formats[] = {{4, Codebook::kMul1}, {6, Codebook::k3Inst}, {3, Codebook::kMcg}};
  const Range ranges[] = {{0, 640, 384, 384, 384},
                          {0, 640, 768, 128, 200},
                          {256, 256, 384, 384, 456},
                          {512, 128, 0, 896, 1000},
                          {128, 384, 128, 640, 641}};
  uint32_t seed = 600;
  for (const auto& f : formats) {
    const Exl3Weight w = random_weight(640, 896, f.bits, f.cb, seed++);
    const DeviceWeight d(w);
    const Tensor want = exl3_decode_original_ref(w);
    for (const Range& r : ranges) {
      const std::string label = "bits " + std::to_string(f.bits) + " codebook " +
                                std::to_string(static_cast<int>(f.cb)) + " rows [" + std::to_string(r.row0) + ", " +
                                std::to_string(r.row0 + r.rows) + ") cols [" + std::to_string(r.col0) + ", " +
                                std::to_string(r.col0 + r.cols) + ") ld " + std::to_string(r.ld);
      expect_range_matches(gpu_decode(w, d, r), want, w.n, r, label);
    }
  }
}

class Exl3DecodeOriginalFixtureGpuTest : public Exl3DecodeOriginalGpuTest,
                                         public ::testing::WithParamInterface<std::string> {};

TEST_P(Exl3DecodeOriginalFixtureGpuTest, MatchesExllamaReconstructedWeight) {
  testing::FixtureLinear f;
  ASSERT_NO_FATAL_FAILURE(testing::load_fixture_linear(GetParam(), {"weight_reconstructed"}, f));
  const Exl3Weight& w = f.weight;
  const Tensor* reconstructed = &f.dump["weight_reconstructed"];
  ASSERT_EQ(reconstructed->shape(), Shape({w.k, w.n}));

  const DeviceWeight d(w);
  const Range all{0, w.k, 0, w.n, w.n};
  const std::vector<uint16_t> got = gpu_decode(w, d, all);
  expect_range_matches(got, exl3_decode_original_ref(w), w.n, all, GetParam() + " vs exl3_decode_original_ref");

  const Tensor want = reconstructed->to_f32();
  double max_err = 0.0;
  int64_t identical = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = half_bits_to_float(got[i]);
    const float e = want.data<float>()[i];
    max_err = std::max(max_err, std::isnan(g) ? INFINITY : std::fabs(double{g} - e));
    identical += g == e;
  }
  std::printf("%s: max |W_gpu - weight_reconstructed| = %.3g (bound %.3g), %lld of %zu identical\n", GetParam().c_str(),
              max_err, kWeightTolerance, static_cast<long long>(identical), got.size());
  EXPECT_LE(max_err, kWeightTolerance);
}

INSTANTIATE_TEST_SUITE_P(Layer0, Exl3DecodeOriginalFixtureGpuTest,
                         ::testing::Values("self_attn.q_proj", "mlp.down_proj"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "self_attn.q_proj" ? std::string("QProj") : std::string("DownProj");
                         });

// ---- Timing (printout only) ------------------------------------------------------------------------

// An 8B MLP-sized weight (k 4096, n 14336, 58.7 M weights): the inner-basis decode
// (launch_exl3_decode) and the original-basis one, each as 20 launches between two events.
TEST_F(Exl3DecodeOriginalGpuTest, TimingPrintout) {
  constexpr int64_t kK = 4096;
  constexpr int64_t kN = 14336;
  constexpr int kWarmup = 3;
  constexpr int kIters = 20;
  const std::vector<int16_t> words =
      testing::random_trellis_words(static_cast<size_t>(kK / 16 * (kN / 16) * 16 * 8), 2463534242u);
  DeviceBuffer<int16_t> trellis(words.size());
  trellis.upload(words.data(), words.size());
  std::vector<uint16_t> scales(static_cast<size_t>(std::max(kK, kN)), float_to_half_bits(0.75f));
  DeviceBuffer<__half> suh(static_cast<size_t>(kK)), svh(static_cast<size_t>(kN));
  suh.upload(scales.data(), static_cast<size_t>(kK));
  svh.upload(scales.data(), static_cast<size_t>(kN));
  DeviceBuffer<__half> out(static_cast<size_t>(kK * kN));
  cudaEvent_t start, stop;
  EXL3_CUDA_CHECK(cudaEventCreate(&start));
  EXL3_CUDA_CHECK(cudaEventCreate(&stop));
  const auto time_us = [&](const auto& launch) {
    for (int i = 0; i < kWarmup; ++i) launch();
    EXL3_CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (int i = 0; i < kIters; ++i) launch();
    EXL3_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    EXL3_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    EXL3_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return 1e3 * ms / kIters;
  };
  for (Codebook cb : kCodebooks) {
    for (int bits : {2, 4, 8}) {
      Exl3DecodeParams inner;
      inner.trellis = trellis.get();
      inner.out = out.get();
      inner.k = kK;
      inner.n = kN;
      inner.bits = bits;
      inner.codebook = cb;
      Exl3DecodeOriginalParams original;
      original.trellis = trellis.get();
      original.suh = suh.get();
      original.svh = svh.get();
      original.out = out.get();
      original.k = kK;
      original.n = kN;
      original.rows = kK;
      original.cols = kN;
      original.ld = kN;
      original.bits = bits;
      original.codebook = cb;
      const double inner_us = time_us([&] { launch_exl3_decode(inner, nullptr); });
      const double original_us = time_us([&] { launch_exl3_decode_original(original, nullptr); });
      const double weights = static_cast<double>(kK * kN);
      std::printf(
          "timing decode %dx%d K=%d codebook %d: inner basis %.1f us (%.2f G weights/ms), original basis "
          "%.1f us (%.2f G weights/ms, %.2fx the inner)\n",
          static_cast<int>(kK), static_cast<int>(kN), bits, static_cast<int>(cb), inner_us, weights / inner_us / 1e6,
          original_us, weights / original_us / 1e6, original_us / inner_us);
    }
  }
  EXL3_CUDA_CHECK(cudaEventDestroy(start));
  EXL3_CUDA_CHECK(cudaEventDestroy(stop));
  EXL3_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace exl3
