// Step graphs under tensor parallelism: 2 ranks as threads of this process, rank r on GPU r with
// its own CUDA backend and an NCCL communicator on that backend's stream (wait_each_op off, as GPU
// workers run it; rendezvous through an in-process store). On each rank the fixture model's shard
// runs three times on the same backend and communicator: eagerly, eagerly again (the spread of eager
// runs) and with step graphs, whose graphs hold the all-reduces and the head's all-gather. The
// gathered logits must agree within kGraphLogitsTolerance plus twice the eager spread, with one graph
// per (sequences, page bucket) and every decode step replayed. Even and uneven (1:3 MLP and
// vocabulary) splits; the uneven head gathers with grouped broadcasts. Skips below 2 GPUs.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/test_paths.h"
#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.cuh"
#include "model/step_graph_scenario.h"
#include "worker/comm/in_memory_store.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/model/llama_model.h"

namespace exl3 {
namespace {

using testing::kGraphNumPages;
using testing::kGraphPageSize;
using testing::Lane;

constexpr int kWorld = 2;

using testing::cuda_device_count;

// Rank `rank` of 2: KV heads [2r, 2r + 2) of 4 (query heads follow), MLP columns and vocabulary
// rows split at the middle (even) or at a quarter (uneven; both multiples of 128).
ModelShard tp_shard(const ModelConfig& c, int rank, bool uneven) {
  ModelShard s;
  s.mode = ShardMode::kTensorParallel;
  s.rank = rank;
  s.world_size = kWorld;
  s.first_layer = 0;
  s.end_layer = c.num_layers;
  const int64_t kv_mid = c.num_kv_heads / 2;
  const int64_t mlp_mid = uneven ? c.intermediate_size / 4 / 128 * 128 : c.intermediate_size / 2 / 128 * 128;
  const int64_t vocab_mid = uneven ? c.vocab_size / 4 / 128 * 128 : c.vocab_size / 2 / 128 * 128;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerSlice sl;
    sl.kv_head_begin = rank == 0 ? 0 : kv_mid;
    sl.kv_head_end = rank == 0 ? kv_mid : c.num_kv_heads;
    sl.mlp_begin = rank == 0 ? 0 : mlp_mid;
    sl.mlp_end = rank == 0 ? mlp_mid : c.intermediate_size;
    s.layers.push_back(sl);
  }
  s.vocab_begin = rank == 0 ? 0 : vocab_mid;
  s.vocab_end = rank == 0 ? vocab_mid : c.vocab_size;
  s.has_embedding = true;
  s.has_head = true;
  return s;
}

class StepGraphMultiGpu : public ::testing::TestWithParam<bool> {};

TEST_P(StepGraphMultiGpu, TensorParallelDecodeMatchesEager) {
  const int devices = cuda_device_count();
  if (devices < kWorld) GTEST_SKIP() << "needs " << kWorld << " CUDA devices, this machine has " << devices;
  const bool uneven = GetParam();
  const std::string dir = testing::source_path("models/exl3-4.0bpw");
  EXL3_REQUIRE_FILE(dir + "/config.json");
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status();

  InMemoryStore store;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string prefix = std::string(info->test_suite_name()) + "." + info->name();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      EXL3_CUDA_CHECK(cudaSetDevice(rank));
      CudaBackendOptions bo;
      bo.device = rank;
      bo.label = "rank " + std::to_string(rank);
      auto made = make_cuda_backend(bo);
      ASSERT_TRUE(made.ok()) << "rank " << rank << ": " << made.status();
      std::shared_ptr<Backend> backend(std::move(*made));
      NcclOptions no;
      no.rank = rank;
      no.world_size = kWorld;
      no.device = rank;
      no.stream = cuda_stream_of(*backend);
      no.prefix = prefix;
      no.wait_each_op = false;
      auto comm = make_nccl_communicator(no, store);
      ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
      ASSERT_TRUE((*comm)->supports_graph_capture());

      // Three models on the one backend whose stream the communicator uses; all reserved before
      // any step (the backend's scratch, which graphs point into, keeps its first size).
      const ModelShard shard = tp_shard(*config, rank, uneven);
      std::unique_ptr<LlamaModel> models[3];
      std::unique_ptr<KvCache> caches[3];
      for (int m = 0; m < 3; ++m) {
        auto model = LlamaModel::load_shard(dir, shard, backend);
        ASSERT_TRUE(model.ok()) << "rank " << rank << ": " << model.status();
        models[m] = *std::move(model);
        ASSERT_TRUE(models[m]->reserve(testing::step_graph_limits(m == 2)).ok());
        auto cache = KvCache::create(models[m]->cache_shape(kGraphNumPages, kGraphPageSize), *backend);
        ASSERT_TRUE(cache.ok()) << cache.status();
        caches[m] = *std::move(cache);
      }
      const std::vector<Lane> lanes = {Lane{"eager", models[0].get(), caches[0].get(), comm->get()},
                                       Lane{"eager control", models[1].get(), caches[1].get(), comm->get()},
                                       Lane{"graphs", models[2].get(), caches[2].get(), comm->get()}};
      const std::string label = "rank " + std::to_string(rank) + (uneven ? " uneven" : " even");
      const testing::LockstepStats stats =
          testing::run_decode_scenario(lanes, config->vocab_size, /*salt=*/5, label, /*verbose=*/rank == 0);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(stats.graph_keys.size(), 5u) << label;
      testing::expect_lockstep_results(lanes, stats, 0, 0);
      ASSERT_TRUE(backend->synchronize().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(Splits, StepGraphMultiGpu, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "uneven_1_3" : "even"); });

}  // namespace
}  // namespace exl3
