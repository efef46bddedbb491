// Sharded logits through real CUDA worker processes, one per GPU, all-reducing through NCCL or
// the one-shot P2P all-reduce (--all-reduce oneshot): tensor parallel (even and 1:3 caps) and
// layer mode must equal the whole model on one GPU (mean KL <= 1e-4) and meet ExLlamaV3's logits
// (mean KL <= 1e-3, top-1 >= 99%).
#include <cuda_runtime.h>

#include "integration/sharded_cluster.h"
#include "kernels/cuda/cuda_backend.h"

namespace exl3 {
namespace {

class ShardedLogitsGpu : public ::testing::TestWithParam<ClusterCase> {};

TEST_P(ShardedLogitsGpu, MatchOneGpuAndExLlamaV3) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  const int world = static_cast<int>(GetParam().caps_gib.size());
  if (devices < world) GTEST_SKIP() << "needs " << world << " CUDA devices, this machine has " << devices;
  const std::string dir = testing::source_path("models/exl3-4.0bpw");
  auto cuda = make_cuda_backend(CudaBackendOptions{});
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto single = LlamaModel::load_shard(dir, ModelShard::full(*config), std::shared_ptr<Backend>(std::move(*cuda)));
  ASSERT_TRUE(single.ok()) << single.status();
  ClusterBackend backend;
  backend.kind = BackendKind::kCuda;
  backend.max_kl_vs_reference = 1e-3;
  backend.max_kl_vs_single = 1e-4;
  backend.single = [&](const std::vector<int32_t>& ids) { return forward_sequence(**single, ids, {}); };
  run_sharded_logits_case(GetParam(), backend);
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardedLogitsGpu,
                         ::testing::Values(ClusterCase{"tp2", PlanMode::kTensorParallel, {20.0, 20.0}},
                                           ClusterCase{"tp2_uneven_1_3", PlanMode::kTensorParallel, {20.0, 60.0}},
                                           ClusterCase{"layers2", PlanMode::kLayers, {20.0, 24.0}},
                                           // Every all-reduce of the prompts one-shot (parts up to 4 MiB)
                                           // over CUDA IPC between the worker processes.
                                           ClusterCase{"tp2_oneshot", PlanMode::kTensorParallel, {20.0, 20.0}, false,
                                                       "oneshot", 4096}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace exl3
