// The planner's CUDA pricing against a real CUDA backend: each RankPlan of the fixture model (tp
// and layer split, 1 to 3 ranks, uneven caps) is loaded on GPU 0 and its engine created with the
// plan's step limits, as a GPU worker does. The backend's own counts must equal the plan exactly:
// weights, KV cache, forward workspace (A = 2 bytes), and the whole allocator (weights + cache +
// workspace + scratch + engine buffers + cuBLAS workspace) must equal the exact reserve of the
// rank's shape and stay within the plan's bound. Prints the driver's view of device memory (for
// calibrating kCudaOverheads.context_bytes).
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>

#include "common/test_paths.h"
#include "coordinator/planner/byte_units.h"
#include "coordinator/planner/shard_planner.h"
#include "gtest/gtest.h"
#include "planner/rank_plan_conversions.h"
#include "kernels/cuda/cuda_backend.h"
#include "worker/engine.h"
#include "worker/model/llama_model.h"
#include "worker/model/model_shard.h"

namespace exl3 {
namespace {

using testing::shape_of;


struct Case {
  PlanMode mode;
  std::vector<double> caps_gib;
};

TEST(CudaAllocation, BackendCountsEqualThePlan) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_GT(count, 0);
  const std::string dir = testing::source_path("models/exl3-4.0bpw");
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto tensors = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  auto fp = build_model_footprint(*config, BackendKind::kCuda, &*tensors);
  ASSERT_TRUE(fp.ok()) << fp.status();

  const Case cases[] = {{PlanMode::kTensorParallel, {20}},
                        {PlanMode::kTensorParallel, {20, 24}},
                        {PlanMode::kTensorParallel, {2.0, 2.0, 4.0}},
                        {PlanMode::kLayers, {20, 24}},
                        {PlanMode::kLayers, {1.2, 2.0, 2.0}}};  // rank 0 below the CUDA overheads: no layers
  for (const Case& c : cases) {
    PlannerOptions o;
    o.mode = c.mode;
    for (double g : c.caps_gib) o.caps.push_back(gib_to_bytes(g));
    o.max_seq_len = 700;
    o.max_batch = 3;
    o.page_size = 64;
    o.step_tokens = 77;
    auto plans = plan_shards(*fp, o);
    ASSERT_TRUE(plans.ok()) << plans.status();
    o.pages = plans->front().num_pages;  // the plan's cache (fitted to the caps when needed)
    const StepShape step = o.step_shape();
    const uint64_t outside = cuda_plan_reserve(*fp, o).outside_allocator();
    for (const RankPlan& p : *plans) {
      if (p.total_bytes() == 0) continue;  // a layer-split rank left without layers loads nothing
      SCOPED_TRACE(::testing::Message() << plan_mode_name(c.mode) << " over " << c.caps_gib.size() << " ranks, rank "
                                        << p.rank);
      CudaBackendOptions bo;
      bo.device = 0;
      bo.cap_bytes = 0;
      bo.label = "rank " + std::to_string(p.rank);
      auto made = make_cuda_backend(bo);
      ASSERT_TRUE(made.ok()) << made.status();
      std::shared_ptr<Backend> backend(std::move(*made));
      auto model = LlamaModel::load_shard(dir, model_shard_of(p), backend);
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_EQ((*model)->allocated_bytes(), p.weight_bytes) << "weights";
      EngineOptions eo;
      eo.num_pages = p.num_pages;
      eo.page_size = p.page_size;
      eo.max_step_tokens = step.tokens;
      eo.max_seqs = step.seqs;
      eo.max_logit_rows = step.logit_rows;
      auto engine = Engine::create(*std::move(model), eo, nullptr);
      ASSERT_TRUE(engine.ok()) << engine.status();
      ASSERT_TRUE(backend->synchronize().ok());
      const RankShape shape = shape_of(p);
      EXPECT_EQ((*engine)->cache_bytes(), p.cache_bytes) << "KV cache";
      EXPECT_EQ((*engine)->model().workspace_bytes(), forward_workspace_bytes(*config, shape, step, 2)) << "workspace";
      const CudaRankReserve exact = cuda_rank_reserve(*config, shape, step);
      const uint64_t expected = p.weight_bytes + p.cache_bytes + exact.total() - exact.outside_allocator();
      const DeviceMemoryReport mem = device_memory_report(*backend);
      std::printf("%s rank %d: allocated %llu, expected %llu, plan bound %llu (+ %llu outside the allocator); %s\n",
                  plan_mode_name(c.mode).c_str(), p.rank, static_cast<unsigned long long>(mem.backend_bytes),
                  static_cast<unsigned long long>(expected),
                  static_cast<unsigned long long>(p.total_bytes() - outside), static_cast<unsigned long long>(outside),
                  mem.to_string().c_str());
      EXPECT_EQ(mem.backend_bytes, expected) << "whole allocator";
      EXPECT_LE(mem.backend_bytes, p.total_bytes() - outside) << "over the plan's bound";
    }
  }
}

}  // namespace
}  // namespace exl3
