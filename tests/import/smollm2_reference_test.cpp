// SmolLM2-135M-Instruct imported from its GGUF (acceptance 2 and 3 of P8) against Hugging Face
// transformers loading the same GGUF (reference data made by
// scripts/testdata/make_smollm2_reference.py, committed under tests/data/gguf/):
// - tokenizer: >= 200 strings decode back to their text and encode exactly as transformers' tokenizer
//   with the pre-tokenizer the GGUF names ("smollm": each digit alone, then GPT-2's byte-level split,
//   as SmolLM2's own tokenizer.json and llama.cpp do). transformers' GGUF loader ignores that name
//   and uses GPT-2's split alone; its ids are printed for comparison (they differ only where a
//   non-ASCII digit such as "¼" follows a space);
// - logits: 4 prompts of 65 tokens through our CPU path, mean KL(transformers || ours) <= 1e-3 and
//   top-1 agreement >= 99%. The reference keeps only each row's top-128 log-probabilities and its
//   logsumexp, so KL is over those 128 tokens plus one bucket for the rest of the vocabulary (a
//   lower bound of the full KL that misses only how the tail's mass is spread).
// The model is not in the repository: these tests run when EXL3_SMOLLM2_DIR names an imported
// directory (exl3-import SmolLM2-135M-Instruct.Q4_1.gguf DIR) and are skipped otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/test_paths.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/kv_cache.h"
#include "worker/loader/safetensors.h"
#include "worker/model/llama_model.h"

namespace exl3 {
namespace {

std::string smollm2_dir() {
  const char* dir = std::getenv("EXL3_SMOLLM2_DIR");
  return dir != nullptr ? std::string(dir) : std::string();
}

#define REQUIRE_SMOLLM2()                                                                         \
  if (smollm2_dir().empty()) GTEST_SKIP() << "set EXL3_SMOLLM2_DIR to an imported SmolLM2 directory"

TEST(SmolLM2Reference, TokenizerMatchesTransformers) {
  REQUIRE_SMOLLM2();
  auto tok = Tokenizer::from_model_dir(smollm2_dir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::ifstream in(testing::test_data("gguf/smollm2_tokenizer_ref.json"));
  const nlohmann::json ref = nlohmann::json::parse(in);
  int total = 0, equal = 0, equal_gguf_loader = 0, round_trip = 0;
  for (const auto& e : ref["encodings"]) {
    const std::string text = e["text"];
    const std::vector<int32_t> want = e["ids_model_pre"];
    const std::vector<int32_t> gguf_loader = e["ids"];
    const std::vector<int32_t> got = tok->encode(text);
    ++total;
    equal += got == want;
    round_trip += tok->decode(got) == text;
    EXPECT_EQ(got, want) << "text: " << nlohmann::json(text).dump();
    if (got == gguf_loader) {
      ++equal_gguf_loader;
    } else {
      std::printf("differs from transformers' GGUF loader (GPT-2 split only): %s\n", nlohmann::json(text).dump().c_str());
    }
  }
  std::printf("SmolLM2 tokenizer: %d/%d strings encode as transformers with the GGUF's pre-tokenizer, %d/%d as "
              "transformers' GGUF loader; %d/%d round-trip\n",
              equal, total, equal_gguf_loader, total, round_trip, total);
  EXPECT_GE(total, 200);
  EXPECT_EQ(round_trip, total);
}

TEST(SmolLM2Reference, LogitsMatchTransformers) {
  REQUIRE_SMOLLM2();
  auto model = LlamaModel::load(smollm2_dir());
  ASSERT_TRUE(model.ok()) << model.status();
  auto ref = SafetensorsFile::open(testing::test_data("gguf/smollm2_logits_ref.safetensors"));
  ASSERT_TRUE(ref.ok()) << ref.status();
  const Tensor ids = *(*ref)->get("input_ids");
  const Tensor top_ids = *(*ref)->get("top_ids");
  const Tensor top_lp = *(*ref)->get("top_logprobs");
  const Tensor lse = *(*ref)->get("logsumexp");
  const int64_t prompts = ids.dim(0), n = ids.dim(1), k = top_ids.dim(2);
  const int64_t vocab = (*model)->config().vocab_size;
  double kl_sum = 0, kl_max = 0, lse_err = 0;
  int64_t rows = 0, top1 = 0;
  for (int64_t p = 0; p < prompts; ++p) {
    std::vector<int32_t> seq(ids.data<int32_t>() + p * n, ids.data<int32_t>() + (p + 1) * n);
    KvCache cache((*model)->cache_shape(/*num_pages=*/8, /*page_size=*/16), (*model)->backend());
    PageTable table;
    ASSERT_TRUE(cache.reserve(table, n).ok());
    const Tensor logits = (*model)->forward(seq, 0, cache, table, LogitsMode::kAll);
    ASSERT_EQ(logits.shape(), (Shape{n, vocab}));
    for (int64_t r = 0; r < n; ++r) {
      const float* row = logits.data<float>() + r * vocab;
      double mx = row[0];
      int64_t arg = 0;
      for (int64_t v = 1; v < vocab; ++v) {
        if (row[v] > mx) {
          mx = row[v];
          arg = v;
        }
      }
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
      const double our_lse = mx + std::log(sum);
      const int64_t base = (p * n + r) * k;
      double kl = 0, ref_mass = 0, our_mass = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double lp_ref = top_lp.data<float>()[base + j];
        const double lp_our = row[top_ids.data<int32_t>()[base + j]] - our_lse;
        kl += std::exp(lp_ref) * (lp_ref - lp_our);
        ref_mass += std::exp(lp_ref);
        our_mass += std::exp(lp_our);
      }
      const double ref_tail = std::max(1.0 - ref_mass, 0.0), our_tail = std::max(1.0 - our_mass, 1e-300);
      if (ref_tail > 0) kl += ref_tail * std::log(ref_tail / our_tail);
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      top1 += arg == top_ids.data<int32_t>()[base];
      // Logits may differ by a per-row constant; only the spread matters, reported for information.
      lse_err = std::max(lse_err, std::fabs(our_lse - lse.data<float>()[p * n + r]));
      ++rows;
    }
  }
  const double mean_kl = kl_sum / static_cast<double>(rows);
  const double agree = static_cast<double>(top1) / static_cast<double>(rows);
  std::printf("SmolLM2 logits vs transformers (%s): %lld rows, mean KL %.3g, max KL %.3g, top-1 %.2f%% (%lld/%lld), "
              "max |logsumexp diff| %.3g\n",
              smollm2_dir().c_str(), static_cast<long long>(rows), mean_kl, kl_max, 100.0 * agree,
              static_cast<long long>(top1), static_cast<long long>(rows), lse_err);
  EXPECT_LE(mean_kl, 1e-3);
  EXPECT_GE(agree, 0.99);
}

}  // namespace
}  // namespace exl3
