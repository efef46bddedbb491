// The planner's byte counts against what the CPU worker really allocates: each RankPlan of the
// fixture model is loaded with LlamaModel::load_shard and the worker's own allocated-weight and KV
// cache byte counts must equal the plan's, in both modes and for uneven splits.
#include <memory>

#include "common/test_paths.h"
#include "coordinator/planner/shard_planner.h"
#include "gtest/gtest.h"
#include "planner/rank_plan_conversions.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"
#include "worker/model/model_shard.h"

namespace exl3 {
namespace {


void expect_worker_matches(PlanMode mode, const std::vector<double>& weights) {
  const std::string dir = testing::source_path("models/exl3-4.0bpw");
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto tensors = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  auto fp = build_model_footprint(*config, BackendKind::kCpu, &*tensors);
  ASSERT_TRUE(fp.ok()) << fp.status();

  PlannerOptions o;
  o.mode = mode;
  o.max_seq_len = 512;
  o.max_batch = 2;
  o.page_size = 64;
  o.step_tokens = 32;
  const uint64_t whole = fp->total_weight_bytes() + fp->total_cache_bytes(o.cache_tokens());
  const uint64_t ws = fp->workspace.bytes(o.step_tokens, o.max_seq_len);
  double sum = 0;
  for (double w : weights) sum += w;
  for (double w : weights) {
    o.caps.push_back(static_cast<uint64_t>(static_cast<double>(whole) * 1.5 * w / sum) + ws + fp->replicated_bytes());
  }
  auto plans = plan_shards(*fp, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  for (const RankPlan& p : *plans) {
    SCOPED_TRACE(::testing::Message() << plan_mode_name(mode) << " rank " << p.rank);
    const ModelShard shard = model_shard_of(p);
    ASSERT_TRUE(shard.validate(*config).ok()) << shard.validate(*config);
    auto model = LlamaModel::load_shard(dir, shard);
    ASSERT_TRUE(model.ok()) << model.status();
    // The worker adds q_norm.nbytes() * 2 per layer also when a model has no q/k norms, and an
    // undefined Tensor reports 4 bytes (shape {} is a scalar): 8 bytes per held layer too many.
    EXPECT_EQ((*model)->allocated_bytes(), p.weight_bytes);
    EXPECT_EQ(KvCache::bytes_for((*model)->cache_shape(p.num_pages, p.page_size), sizeof(float)), p.cache_bytes);
  }
}

TEST(WorkerAllocation, TensorParallelMatchesPlan) {
  expect_worker_matches(PlanMode::kTensorParallel, {1, 3});
  expect_worker_matches(PlanMode::kTensorParallel, {1, 1, 2});
}

TEST(WorkerAllocation, LayerSplitMatchesPlan) {
  expect_worker_matches(PlanMode::kLayers, {1, 3});
  expect_worker_matches(PlanMode::kLayers, {2, 1, 1});
}

}  // namespace
}  // namespace exl3
