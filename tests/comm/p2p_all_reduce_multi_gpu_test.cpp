// The P2P all-reduce communicator over NCCL on two GPUs (one thread each, peer access between
// them): one-shot sums and fused residual adds match oneshot_all_reduce_ref bit for bit, parts
// over max_bytes go through NCCL and still sum, and calls captured in each rank's CUDA graph
// replay with fresh inputs. Skips with a message on a machine with fewer than two GPUs.
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "comm/p2p_ranks.h"
#include "comm/rank_threads.h"
#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "worker/comm/nccl_communicator.h"

namespace exl3 {
namespace {

using testing::P2pRank;
using testing::to_device;
using testing::to_host;

#define EXL3_REQUIRE_TWO_GPUS()                                                              \
  do {                                                                                       \
    const int exl3_devices_ = testing::cuda_device_count();                                  \
    if (exl3_devices_ < 2) {                                                                 \
      GTEST_SKIP() << "needs 2 CUDA devices, this machine has " << exl3_devices_;            \
    }                                                                                        \
  } while (0)

// Multiples of 1/16 in [-16, 16): exact in F16, and so are sums of two.
Tensor random_f16(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::zeros(DType::kF16, {count});
  auto* bits = static_cast<uint16_t*>(t.mutable_raw());
  for (int64_t i = 0; i < count; ++i) bits[i] = float_to_half_bits(static_cast<float>(static_cast<int>(rng() % 512) - 256) / 16.0f);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

P2pAllReduceOptions options(bool wait_each_op) {
  P2pAllReduceOptions o;
  o.prefix = testing::test_prefix();
  o.max_bytes = 64 << 10;
  o.timeout = std::chrono::milliseconds(20000);
  o.init_timeout = std::chrono::milliseconds(60000);
  o.wait_each_op = wait_each_op;
  return o;
}

testing::InnerFactory nccl_inner(const std::string& prefix, bool wait_each_op) {
  return [=](const P2pRank& r, RendezvousStore& store) -> std::unique_ptr<Communicator> {
    NcclOptions no;
    no.rank = r.rank;
    no.world_size = 2;
    no.device = r.device;
    no.stream = r.stream;
    no.prefix = prefix + "/nccl";
    no.timeout = std::chrono::milliseconds(20000);
    no.wait_each_op = wait_each_op;
    auto comm = make_nccl_communicator(no, store);
    if (!comm.ok()) {
      ADD_FAILURE() << comm.status();
      return nullptr;
    }
    return *std::move(comm);
  };
}

TEST(P2pAllReduceMultiGpu, OneShotAndNcclPathsSum) {
  EXL3_REQUIRE_TWO_GPUS();
  const P2pAllReduceOptions o = options(true);
  const std::vector<Tensor> small = {random_f16(8192, 1), random_f16(8192, 2)};
  const std::vector<Tensor> large = {random_f16(300000, 3), random_f16(300000, 4)};
  const std::vector<Tensor> residual = {Tensor::from_vector<float>(std::vector<float>(8192, 0.25f), {8192}),
                                        Tensor::from_vector<float>(std::vector<float>(8192, 0.25f), {8192})};
  Tensor want_small = Tensor::zeros(DType::kF16, {8192});
  oneshot_all_reduce_ref(small, want_small, false);
  Tensor want_large = Tensor::zeros(DType::kF16, {300000});
  oneshot_all_reduce_ref(large, want_large, false);  // exact: both paths give these bits
  Tensor want_add = residual[0].clone();
  oneshot_all_reduce_ref(small, want_add, true);
  testing::run_p2p_ranks(2, [](int r) { return r; }, o, nccl_inner(o.prefix, true),
                         [&](Communicator& comm, const P2pRank& ctx) {
                           Tensor s = to_device(small[ctx.rank]);
                           ASSERT_TRUE(comm.all_reduce_sum(s).ok());
                           EXPECT_TRUE(same_bits(to_host(s, ctx.stream), want_small)) << "rank " << ctx.rank;
                           Tensor l = to_device(large[ctx.rank]);
                           ASSERT_TRUE(comm.all_reduce_sum(l).ok());
                           EXPECT_TRUE(same_bits(to_host(l, ctx.stream), want_large)) << "rank " << ctx.rank;
                           Tensor part = to_device(small[ctx.rank]);
                           Tensor res = to_device(residual[ctx.rank]);
                           ASSERT_TRUE(comm.all_reduce_add(part, res).ok());
                           EXPECT_TRUE(same_bits(to_host(res, ctx.stream), want_add)) << "rank " << ctx.rank;
                         });
}

TEST(P2pAllReduceMultiGpu, CapturedCallsReplayInCudaGraphs) {
  EXL3_REQUIRE_TWO_GPUS();
  const P2pAllReduceOptions o = options(false);
  const int64_t count = 4096;
  testing::run_p2p_ranks(2, [](int r) { return r; }, o, nccl_inner(o.prefix, false),
                         [&](Communicator& comm, const P2pRank& ctx) {
                           ASSERT_TRUE(comm.supports_graph_capture());
                           Tensor part = to_device(random_f16(count, 0));
                           Tensor res = to_device(Tensor::zeros(DType::kF32, {count}));
                           cudaGraph_t graph = nullptr;
                           EXL3_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
                           const absl::Status captured = comm.all_reduce_add(part, res);
                           EXL3_CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &graph));
                           ASSERT_TRUE(captured.ok()) << captured;
                           cudaGraphExec_t exec = nullptr;
                           EXL3_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
                           EXL3_CUDA_CHECK(cudaGraphDestroy(graph));
                           for (int replay = 0; replay < 4; ++replay) {
                             const std::vector<Tensor> parts = {random_f16(count, 100 + replay),
                                                                random_f16(count, 200 + replay)};
                             Tensor start = Tensor::from_vector<float>(std::vector<float>(count, 1.0f * replay), {count});
                             EXL3_CUDA_CHECK(cudaMemcpy(part.mutable_raw(), parts[ctx.rank].raw(),
                                                        parts[ctx.rank].nbytes(), cudaMemcpyHostToDevice));
                             EXL3_CUDA_CHECK(cudaMemcpy(res.mutable_raw(), start.raw(), start.nbytes(),
                                                        cudaMemcpyHostToDevice));
                             EXL3_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream));
                             ASSERT_TRUE(comm.flush().ok());
                             Tensor want = start.clone();
                             oneshot_all_reduce_ref(parts, want, true);
                             EXPECT_TRUE(same_bits(to_host(res, ctx.stream), want))
                                 << "replay " << replay << " rank " << ctx.rank;
                           }
                           EXL3_CUDA_CHECK(cudaGraphExecDestroy(exec));
                         });
}

}  // namespace
}  // namespace exl3
