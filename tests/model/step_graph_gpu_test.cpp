// Step graphs on one GPU: the 4.0 bpw fixture model with StepLimits::step_graphs against the same
// model run eagerly (and a second eager copy, whose spread bounds the noise of eager runs): logits
// of every prefill and decode step within kGraphLogitsTolerance (plus twice that spread), the same
// greedy tokens, one graph captured per (sequences, page bucket) and every decode step replayed; a
// second KV cache (made after the first is gone, so possibly at the same address) captures its own
// graphs; the Engine with EngineOptions::step_graphs samples the same tokens as without.
#include <memory>
#include <string>

#include "common/cuda_test_util.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/gpu_model.h"
#include "model/step_graph_scenario.h"
#include "worker/engine.h"
#include "worker/model/llama_model.h"

namespace exl3 {
namespace {

using testing::kGraphNumPages;
using testing::kGraphPageSize;
using testing::Lane;
using testing::LockstepStats;
using testing::source_path;

std::string model_dir() { return source_path("models/exl3-4.0bpw"); }

// The fixture model on a CUDA backend of its own, reserved for the tests' limits.
std::unique_ptr<LlamaModel> load_model(bool graphs) {
  std::unique_ptr<LlamaModel> model = testing::load_model_on_gpu(model_dir());
  EXL3_CHECK_OK(model->reserve(testing::step_graph_limits(graphs)));
  return model;
}

std::unique_ptr<KvCache> make_cache(const LlamaModel& model) {
  auto cache = KvCache::create(model.cache_shape(kGraphNumPages, kGraphPageSize), model.backend());
  EXL3_CHECK_OK(cache.status());
  return *std::move(cache);
}

class StepGraphGpu : public testing::CudaTest {
 protected:
  void SetUp() override {
    testing::CudaTest::SetUp();
    if (HasFatalFailure()) return;
    EXL3_REQUIRE_FILE(model_dir() + "/config.json");
    eager_ = load_model(false);
    control_ = load_model(false);
    graphs_ = load_model(true);
    ASSERT_TRUE(graphs_->backend().supports_step_graphs());
  }

  std::vector<Lane> lanes(KvCache& eager, KvCache& control, KvCache& graphs) const {
    return {Lane{"eager", eager_.get(), &eager, nullptr}, Lane{"eager control", control_.get(), &control, nullptr},
            Lane{"graphs", graphs_.get(), &graphs, nullptr}};
  }

  std::unique_ptr<LlamaModel> eager_, control_, graphs_;
};

TEST_F(StepGraphGpu, DecodeStepsMatchEagerAcrossBatchesAndPageBuckets) {
  auto c0 = make_cache(*eager_), c1 = make_cache(*control_), c2 = make_cache(*graphs_);
  const std::vector<Lane> l = lanes(*c0, *c1, *c2);
  const LockstepStats stats =
      testing::run_decode_scenario(l, eager_->config().vocab_size, /*salt=*/3, "one cache", /*verbose=*/true);
  ASSERT_FALSE(HasFatalFailure());
  // Batch 3 in buckets 4 and 8, batch 1 in buckets 2, 4 and 8.
  EXPECT_EQ(stats.graph_keys.size(), 5u);
  testing::expect_lockstep_results(l, stats, 0, 0);
}

TEST_F(StepGraphGpu, SecondCacheCapturesItsOwnGraphs) {
  LockstepStats first;
  {
    auto c0 = make_cache(*eager_), c1 = make_cache(*control_), c2 = make_cache(*graphs_);
    first = testing::run_decode_scenario(lanes(*c0, *c1, *c2), eager_->config().vocab_size, /*salt=*/3, "first cache",
                                         /*verbose=*/false);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_GT(graphs_->step_graph_count(), 0);
  }
  // The first caches are gone; the new ones may reuse their device memory. Other pages, other
  // prompts, the same buckets: graphs keyed by the first cache must not be replayed.
  const int64_t captures = graphs_->step_graph_count(), replays = graphs_->graph_replays();
  auto c0 = make_cache(*eager_), c1 = make_cache(*control_), c2 = make_cache(*graphs_);
  const std::vector<Lane> l = lanes(*c0, *c1, *c2);
  const LockstepStats second =
      testing::run_decode_scenario(l, eager_->config().vocab_size, /*salt=*/11, "second cache", /*verbose=*/false);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(second.graph_keys, first.graph_keys);
  testing::expect_lockstep_results(l, second, captures, replays);
}

// Through the Engine (what a worker runs): greedy decode of 3 sequences for 30 steps with graphs on
// and off samples the same tokens (near ties aside, which this model's greedy path does not hit at
// these prompts; a mismatch prints the step).
TEST_F(StepGraphGpu, EngineWithGraphsSamplesTheSameTokens) {
  std::vector<std::vector<int32_t>> sampled[2];
  int64_t captures = 0, replays = 0;
  for (int graphs = 0; graphs < 2; ++graphs) {
    EngineOptions eo;
    eo.num_pages = kGraphNumPages;
    eo.page_size = kGraphPageSize;
    eo.max_step_tokens = 128;
    eo.max_seqs = 4;
    eo.max_logit_rows = 4;
    eo.step_graphs = graphs == 1;
    auto engine = Engine::create(load_model(false), eo, nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->model().limits().step_graphs, graphs == 1);
    StepInput in;
    const int64_t lengths[3] = {5, 17, 40};
    for (int64_t i = 0; i < 3; ++i) {
      StepSequence s;
      s.seq_id = static_cast<uint64_t>(i + 1);
      s.tokens = testing::prompt(lengths[i], (*engine)->model().config().vocab_size, static_cast<uint64_t>(i + 7));
      s.prompt_len = static_cast<int32_t>(lengths[i]);
      for (int64_t p = 0; p < 8; ++p) s.page_table.push_back(static_cast<int32_t>(i * 8 + p));  // 128 positions
      s.sample = true;
      s.sampling.temperature = 0.0f;
      in.sequences.push_back(std::move(s));
    }
    in.decode_steps = 10;  // the prefill, then 9 decode forwards inside the step
    std::vector<std::vector<int32_t>>& out = sampled[graphs];
    out.assign(3, {});
    for (int round = 0; round < 3; ++round) {
      auto step = (*engine)->run_step(in);
      ASSERT_TRUE(step.ok()) << step.status();
      ASSERT_EQ(step->tokens.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        StepSequence& s = in.sequences[i];
        const std::vector<int32_t>& got = step->tokens[i].second;
        ASSERT_EQ(got.size(), static_cast<size_t>(in.decode_steps));
        out[i].insert(out[i].end(), got.begin(), got.end());
        // Continue from the last sampled token (the others are in the cache already).
        s.start_pos += static_cast<int32_t>(s.tokens.size()) + in.decode_steps - 1;
        s.tokens = {got.back()};
      }
    }
    if (graphs == 1) {
      captures = (*engine)->model().step_graph_count();
      replays = (*engine)->model().graph_replays();
      EXPECT_TRUE((*engine)->model().step_graphs_enabled());
    } else {
      EXPECT_EQ((*engine)->model().graph_replays(), 0);
    }
  }
  std::printf("engine with graphs: %lld graphs captured, %lld replays\n", static_cast<long long>(captures),
              static_cast<long long>(replays));
  // Rounds 2 and 3 are all decode: 9 replays in round 1, 10 in each later round (every forward
  // of one token per sequence).
  EXPECT_EQ(replays, 9 + 10 + 10);
  EXPECT_EQ(captures, 1);  // 3 sequences of 8 pages: bucket 8, the only key
  for (size_t i = 0; i < 3; ++i) {
    for (size_t t = 0; t < sampled[0][i].size(); ++t) {
      EXPECT_EQ(sampled[0][i][t], sampled[1][i][t]) << "sequence " << i << " token " << t;
    }
  }
}

}  // namespace
}  // namespace exl3
