// GPU tests of the CUDA trellis decode and 128-point Hadamard against their CPU references:
// random trellis tiles for every K and codebook (bit exact), the real layer-0 q_proj weight,
// and random fp32 matrices through the Hadamard (1e-5 relative).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_decode.cuh"
#include "kernels/cuda/hadamard128.cuh"
#include "kernels/ops.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

using testing::DeviceBuffer;

constexpr Codebook kCodebooks[] = {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1};

class CudaKernelTest : public testing::CudaTest {};

// Decodes `trellis` on the GPU; returns the fp16 bits of Wq [k, n].
std::vector<uint16_t> gpu_decode(const Tensor& trellis, int bits, Codebook codebook) {
  const int64_t k = trellis.dim(0) * 16;
  const int64_t n = trellis.dim(1) * 16;
  DeviceBuffer<int16_t> d_trellis(static_cast<size_t>(trellis.numel()));
  DeviceBuffer<__half> d_out(static_cast<size_t>(k * n));
  d_trellis.upload(trellis.raw());
  Exl3DecodeParams params;
  params.trellis = d_trellis.get();
  params.out = d_out.get();
  params.k = k;
  params.n = n;
  params.bits = bits;
  params.codebook = codebook;
  launch_exl3_decode(params, nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(static_cast<size_t>(k * n));
  d_out.download(out.data());
  return out;
}

int64_t count_mismatches(const std::vector<uint16_t>& got, const Tensor& want) {
  const auto* bits = static_cast<const uint16_t*>(want.raw());
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == bits[i]) continue;
    if (mismatches < 5) {
      std::printf("  mismatch at %zu: gpu 0x%04X ref 0x%04X\n", i, got[i], bits[i]);
    }
    ++mismatches;
  }
  return mismatches;
}

TEST_F(CudaKernelTest, DecodeMatchesReferenceOnRandomTrellisForEveryBitsAndCodebook) {
  std::mt19937 rng(42);
  constexpr int64_t kTilesK = 16;  // k = 256
  constexpr int64_t kTilesN = 24;  // n = 384
  for (int bits = 1; bits <= 8; ++bits) {
    std::vector<int16_t> words(static_cast<size_t>(kTilesK * kTilesN * 16 * bits));
    for (int16_t& w : words) w = static_cast<int16_t>(rng() & 0xFFFFu);
    const Tensor trellis = Tensor::from_vector(words, {kTilesK, kTilesN, 16 * bits});
    for (Codebook cb : kCodebooks) {
      const std::vector<uint16_t> got = gpu_decode(trellis, bits, cb);
      const Tensor want = exl3_decode_ref(trellis, bits, cb);
      const int64_t mismatches = count_mismatches(got, want);
      std::printf("bits %d codebook %d: %lld / %zu values differ\n", bits, static_cast<int>(cb),
                  static_cast<long long>(mismatches), got.size());
      EXPECT_EQ(mismatches, 0) << "bits " << bits << " codebook " << static_cast<int>(cb);
    }
  }
}

TEST_F(CudaKernelTest, DecodeMatchesExllamaInnerWeightOfLayer0QProj) {
  const std::string model_path = testing::source_path("models/exl3-4.0bpw/model.safetensors");
  const std::string ref_path = testing::test_data("reference/exl3_4.0bpw_linears.safetensors");
  EXL3_REQUIRE_FILE(model_path);
  EXL3_REQUIRE_FILE(ref_path);
  absl::StatusOr<SafetensorsCollection> model = SafetensorsCollection::open_file(model_path);
  absl::StatusOr<SafetensorsCollection> ref = SafetensorsCollection::open_file(ref_path);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<Tensor> trellis = model->get("model.layers.0.self_attn.q_proj.trellis");
  absl::StatusOr<Tensor> want = ref->get("layers.0.self_attn.q_proj.weight_inner_fp16");
  ASSERT_TRUE(trellis.ok()) << trellis.status();
  ASSERT_TRUE(want.ok()) << want.status();
  const std::vector<uint16_t> got = gpu_decode(*trellis, 4, Codebook::kMul1);
  ASSERT_EQ(static_cast<int64_t>(got.size()), want->numel());
  EXPECT_EQ(count_mismatches(got, *want), 0);
}

TEST_F(CudaKernelTest, HadamardMatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 128}, {37, 640}, {9, 4096}}) {
    std::vector<float> host(static_cast<size_t>(rows * cols));
    for (float& v : host) v = dist(rng);
    DeviceBuffer<float> d_data(host.size());
    d_data.upload(host.data());
    launch_hadamard128({d_data.get(), rows, cols}, nullptr);
    EXL3_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(host.size());
    d_data.download(got.data());

    hadamard128_ref(host.data(), rows, cols);
    double max_err = 0.0;
    double max_ref = 0.0;
    int64_t exact = 0;
    for (size_t i = 0; i < host.size(); ++i) {
      max_err = std::max(max_err, std::fabs(double{got[i]} - host[i]));
      max_ref = std::max(max_ref, std::fabs(double{host[i]}));
      exact += got[i] == host[i];
    }
    std::printf("hadamard [%lld, %lld]: max abs err %.3g, max |ref| %.3g, %lld / %zu bit-exact\n",
                static_cast<long long>(rows), static_cast<long long>(cols), max_err, max_ref,
                static_cast<long long>(exact), host.size());
    EXPECT_LE(max_err, 1e-5 * max_ref);
  }
}

}  // namespace
}  // namespace exl3
