// The whole model on one GPU through the CUDA backend, judged against ExLlamaV3's and HF's outputs
// (P1's fidelity: mean KL <= 1e-3, top-1 >= 98%, perplexity within 0.5%), against our CPU backend,
// and incremental decode through scattered pages against a full recompute.
#include <chrono>
#include <cstdio>

#include "bench/perplexity.h"
#include "bench/token_ids_file.h"
#include "common/fixture_rows.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/gpu_model.h"
#include "worker/loader/safetensors.h"
#include "worker/model/llama_model.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

using testing::shared_path;
using testing::source_path;
using testing::test_data;

using testing::load_model_on_gpu;

using testing::row_ids;
using testing::row_logits;

// Mean KL and top-1 of our logits against a reference file's, over its sequences; also vs the CPU.
void expect_logits_match(const std::string& model_dir, const std::string& reference) {
  EXL3_REQUIRE_FILE(model_dir + "/config.json");
  EXL3_REQUIRE_FILE(reference);
  auto gpu = load_model_on_gpu(model_dir);
  auto cpu = LlamaModel::load(model_dir);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto ref = SafetensorsFile::open(reference);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const Tensor ids = *(*ref)->get("input_ids");
  const Tensor logits = (*(*ref)->get("logits")).to_f32();
  double kl = 0.0, top1 = 0.0, kl_cpu = 0.0;
  for (int64_t s = 0; s < ids.dim(0); ++s) {
    const Tensor ours = forward_sequence(*gpu, row_ids(ids, s), {});
    const LogitsComparison c = compare_logits(row_logits(logits, s), ours);
    const LogitsComparison vs_cpu = compare_logits(forward_sequence(**cpu, row_ids(ids, s), {}), ours);
    std::printf("%s sequence %lld: vs reference mean KL %.3g max KL %.3g top-1 %.4f; vs CPU backend mean KL %.3g\n",
                model_dir.c_str(), static_cast<long long>(s), c.mean_kl, c.max_kl, c.top1_agreement, vs_cpu.mean_kl);
    kl += c.mean_kl;
    top1 += c.top1_agreement;
    kl_cpu += vs_cpu.mean_kl;
  }
  kl /= ids.dim(0);
  top1 /= ids.dim(0);
  kl_cpu /= ids.dim(0);
  std::printf("%s on the GPU: mean KL %.3g, top-1 %.4f vs reference; mean KL %.3g vs the CPU backend\n",
              model_dir.c_str(), kl, top1, kl_cpu);
  EXPECT_LE(kl, 1e-3);
  EXPECT_GE(top1, 0.98);
  EXPECT_LE(kl_cpu, 1e-3);
}

void expect_perplexity(const std::string& model_dir, double expected) {
  EXL3_REQUIRE_FILE(model_dir + "/config.json");
  auto ids = load_token_sequences(test_data("reference/heldout_ids.safetensors"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  auto model = load_model_on_gpu(model_dir);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = evaluate_perplexity(*model, (*ids)[0], 256);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s on the GPU: perplexity %.4f (reference %.3f, %+.3f%%), %lld windows, %lld tokens, %.2f s\n",
              model_dir.c_str(), r->perplexity, expected, 100.0 * (r->perplexity / expected - 1.0),
              static_cast<long long>(r->windows), static_cast<long long>(r->scored_tokens), seconds);
  EXPECT_EQ(r->scored_tokens, 75480);
  EXPECT_NEAR(r->perplexity, expected, 0.005 * expected);
}

TEST(LlamaModelGpu, Exl3FourBitLogitsMatchExLlamaV3) {
  expect_logits_match(source_path("models/exl3-4.0bpw"), test_data("reference/exl3_4.0bpw.safetensors"));
}
TEST(LlamaModelGpu, HfBf16LogitsMatchTransformers) {
  expect_logits_match(shared_path("fixtures/hf-tiny-llama"), shared_path("fixtures/reference/hf_bf16.safetensors"));
}
TEST(LlamaModelGpu, PerplexityExl3FourBit) { expect_perplexity(source_path("models/exl3-4.0bpw"), 115.673); }
TEST(LlamaModelGpu, PerplexityExl3TwoPointFiveBit) {
  expect_perplexity(shared_path("fixtures/exl3-2.5bpw"), 120.062);
}
TEST(LlamaModelGpu, PerplexityHfBf16) { expect_perplexity(shared_path("fixtures/hf-tiny-llama"), 115.946); }

// Prefill, then 64 greedy decode steps through 16-token scattered pages, against recomputing the
// whole sequence at once; also times the decode steps (batch 1).
TEST(LlamaModelGpu, IncrementalDecodeMatchesFullRecompute) {
  auto model = load_model_on_gpu(source_path("models/exl3-4.0bpw"));
  auto ref = SafetensorsFile::open(test_data("reference/exl3_4.0bpw.safetensors"));
  ASSERT_TRUE(ref.ok());
  std::vector<int32_t> seq = row_ids(*(*ref)->get("input_ids"), 1);
  const int64_t prompt = static_cast<int64_t>(seq.size()), steps = 64, page_size = 16, vocab = 4096;
  KvCache cache(model->cache_shape(/*num_pages=*/16, page_size), model->backend());
  PageTable decoy, table;
  ASSERT_TRUE(cache.reserve(decoy, 20).ok());
  ASSERT_TRUE(cache.reserve(table, prompt + steps).ok());
  Tensor step_logits = Tensor::zeros(DType::kF32, {steps, vocab});
  Tensor last = model->forward(seq, 0, cache, table, LogitsMode::kLast);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    const float* row = last.data<float>();
    std::copy_n(row, vocab, step_logits.mutable_data<float>() + s * vocab);
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    seq.push_back(next);
    const int32_t pos = static_cast<int32_t>(seq.size() - 1);
    last = model->forward(std::span<const int32_t>(&seq[pos], 1), pos, cache, table, LogitsMode::kLast);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Tensor full = forward_sequence(*model, std::span<const int32_t>(seq).first(prompt + steps - 1), {});
  Tensor full_steps = Tensor::zeros(DType::kF32, {steps, vocab});
  std::copy_n(full.data<float>() + (prompt - 1) * vocab, steps * vocab, full_steps.mutable_data<float>());
  const LogitsComparison c = compare_logits(full_steps, step_logits);
  std::printf("GPU incremental vs full over %lld steps: mean KL %.3g, max KL %.3g, top-1 %.4f; %.1f decode steps/s\n",
              static_cast<long long>(steps), c.mean_kl, c.max_kl, c.top1_agreement, steps / seconds);
  EXPECT_LE(c.max_kl, 1e-3);
  EXPECT_GE(c.top1_agreement, 0.98);
}

// A prompt run as two chunks, the first returning no logits rows (a step with nothing for the head),
// gives the last-token logits of the prompt run at once.
TEST(LlamaModelGpu, ChunkWithoutLogitsThenLastMatchesOneChunk) {
  auto model = load_model_on_gpu(source_path("models/exl3-4.0bpw"));
  auto ref = SafetensorsFile::open(test_data("reference/exl3_4.0bpw.safetensors"));
  ASSERT_TRUE(ref.ok());
  const std::vector<int32_t> seq = row_ids(*(*ref)->get("input_ids"), 1);
  const int64_t n = static_cast<int64_t>(seq.size()), split = n / 2, vocab = 4096;
  KvCache one(model->cache_shape(/*num_pages=*/8, 16), model->backend());
  KvCache two(model->cache_shape(/*num_pages=*/8, 16), model->backend());
  PageTable one_table, two_table;
  ASSERT_TRUE(one.reserve(one_table, n).ok());
  ASSERT_TRUE(two.reserve(two_table, n).ok());
  const Tensor want = model->forward(seq, 0, one, one_table, LogitsMode::kLast);
  const Tensor none = model->forward(std::span<const int32_t>(seq).first(split), 0, two, two_table, LogitsMode::kNone);
  EXPECT_EQ(none.dim(0), 0);
  const Tensor got = model->forward(std::span<const int32_t>(seq).subspan(split), static_cast<int32_t>(split), two,
                                    two_table, LogitsMode::kLast);
  ASSERT_EQ(got.dim(0), 1);
  ASSERT_EQ(got.dim(1), vocab);
  const LogitsComparison c = compare_logits(want, got);
  EXPECT_LE(c.max_kl, 1e-6) << "chunked vs one chunk";
  EXPECT_EQ(c.top1_agreement, 1.0);
}

}  // namespace
}  // namespace exl3
