// The P2P all-reduce communicator on one GPU: two or three ranks as threads sharing device 0,
// over Gloo as the inner communicator. Small device all-reduces and fused residual adds match
// oneshot_all_reduce_ref bit for bit; what is not one-shot reaches the inner communicator; a peer
// that never takes part is DEADLINE_EXCEEDED naming it, then FAILED_PRECONDITION; bad options are
// INVALID_ARGUMENT. (Two GPUs and NCCL: p2p_all_reduce_multi_gpu_test.cpp.)
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <vector>

#include "comm/p2p_ranks.h"
#include "comm/rank_threads.h"
#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

using testing::has_substr;
using testing::P2pRank;
using testing::to_device;
using testing::to_host;

Tensor random_f16(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::zeros(DType::kF16, {count});
  auto* bits = static_cast<uint16_t*>(t.mutable_raw());
  for (int64_t i = 0; i < count; ++i) bits[i] = float_to_half_bits(static_cast<float>(static_cast<int>(rng() % 512) - 256) / 32.0f);
  return t;
}

Tensor random_f32(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::zeros(DType::kF32, {count});
  for (int64_t i = 0; i < count; ++i) t.mutable_data<float>()[i] = static_cast<float>(rng() % 1000) / 7.0f;
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

P2pAllReduceOptions options(std::chrono::milliseconds timeout) {
  P2pAllReduceOptions o;
  o.prefix = testing::test_prefix();
  o.max_bytes = 64 << 10;
  o.timeout = timeout;
  o.init_timeout = std::chrono::milliseconds(20000);
  o.wait_each_op = true;
  return o;
}

// Gloo inner communicators for ranks sharing one store prefix.
testing::InnerFactory gloo_inner(const std::string& prefix, int world, std::chrono::milliseconds timeout) {
  return [=](const P2pRank& r, RendezvousStore& store) -> std::unique_ptr<Communicator> {
    auto comm = make_gloo_communicator(testing::gloo_options(r.rank, world, prefix + "/gloo", timeout), store);
    if (!comm.ok()) {
      ADD_FAILURE() << comm.status();
      return nullptr;
    }
    return *std::move(comm);
  };
}

class P2pAllReduceGpu : public testing::CudaTest {};

TEST_F(P2pAllReduceGpu, SumsAndFusedAddsMatchTheReference) {
  for (int world : {2, 3}) {
    const auto timeout = std::chrono::milliseconds(20000);
    const P2pAllReduceOptions o = options(timeout);
    std::vector<Tensor> parts, residuals;
    for (int r = 0; r < world; ++r) {
      parts.push_back(random_f16(5001, 10 + r));
      residuals.push_back(random_f32(5001, 50));
    }
    Tensor want_sum = Tensor::zeros(DType::kF16, {5001});
    oneshot_all_reduce_ref(parts, want_sum, false);
    Tensor want_add = residuals[0].clone();
    oneshot_all_reduce_ref(parts, want_add, true);
    testing::run_p2p_ranks(world, [](int) { return 0; }, o, gloo_inner(o.prefix, world, timeout),
                           [&](Communicator& comm, const P2pRank& ctx) {
                             Tensor sum = to_device(parts[ctx.rank]);
                             ASSERT_TRUE(comm.all_reduce_sum(sum).ok());
                             EXPECT_TRUE(same_bits(to_host(sum, ctx.stream), want_sum)) << "rank " << ctx.rank;
                             Tensor part = to_device(parts[ctx.rank]);
                             Tensor residual = to_device(residuals[ctx.rank]);
                             ASSERT_TRUE(comm.fuses_residual_add(part, residual));
                             ASSERT_TRUE(comm.all_reduce_add(part, residual).ok());
                             EXPECT_TRUE(same_bits(to_host(residual, ctx.stream), want_add)) << "rank " << ctx.rank;
                             EXPECT_TRUE(comm.flush().ok());
                           });
  }
}

TEST_F(P2pAllReduceGpu, WhatIsNotOneShotGoesToTheInnerCommunicator) {
  const auto timeout = std::chrono::milliseconds(20000);
  const P2pAllReduceOptions o = options(timeout);
  testing::run_p2p_ranks(2, [](int) { return 0; }, o, gloo_inner(o.prefix, 2, timeout),
                         [&](Communicator& comm, const P2pRank& ctx) {
                           // Over max_bytes: Gloo gets it, and Gloo takes host F32 only.
                           Tensor big = to_device(random_f16((64 << 10) / 2 + 1, 3));
                           EXPECT_FALSE(comm.fuses_residual_add(big, big));
                           const absl::Status status = comm.all_reduce_sum(big);
                           EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
                           EXPECT_TRUE(has_substr(std::string(status.message()), "host F32"));
                           // Host F32 tensors are Gloo's, and sum.
                           Tensor host = Tensor::from_vector<float>({1.0f + ctx.rank, 2.0f}, {2});
                           ASSERT_TRUE(comm.all_reduce_sum(host).ok());
                           EXPECT_EQ(host.data<float>()[0], 3.0f);
                           EXPECT_EQ(host.data<float>()[1], 4.0f);
                           EXPECT_FALSE(comm.fuses_residual_add(host, host));
                           // A residual of another dtype than F32 or the part's is not fused.
                           Tensor part = to_device(random_f16(8, 1));
                           Tensor residual_bf16 = to_device(Tensor::zeros(DType::kBF16, {8}));
                           EXPECT_FALSE(comm.fuses_residual_add(part, residual_bf16));
                           EXPECT_EQ(comm.all_reduce_add(part, residual_bf16).code(),
                                     absl::StatusCode::kInvalidArgument);
                           EXPECT_TRUE(comm.barrier().ok());
                         });
}

TEST_F(P2pAllReduceGpu, APeerThatNeverTakesPartIsADeadlineThenTheCommunicatorIsUnusable) {
  const auto timeout = std::chrono::milliseconds(300);
  const P2pAllReduceOptions o = options(timeout);
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_finished = rank0_done.get_future().share();
  testing::run_p2p_ranks(2, [](int) { return 0; }, o, gloo_inner(o.prefix, 2, std::chrono::milliseconds(2000)),
                         [&](Communicator& comm, const P2pRank& ctx) {
                           if (ctx.rank == 1) {  // stays away until rank 0 has given up
                             rank0_finished.wait();
                             return;
                           }
                           Tensor t = to_device(random_f16(1000, 9));
                           const auto start = std::chrono::steady_clock::now();
                           const absl::Status status = comm.all_reduce_sum(t);
                           EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
                           EXPECT_TRUE(has_substr(std::string(status.message()), "rank 1's part did not arrive"));
                           EXPECT_LT(testing::seconds_since(start), 5.0);
                           const absl::Status later = comm.all_reduce_sum(t);
                           EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
                           rank0_done.set_value();
                         });
}

TEST_F(P2pAllReduceGpu, RefusesBadOptions) {
  InMemoryStore store;
  const auto inner = [] { return make_single_rank_communicator(); };
  P2pAllReduceOptions o = options(std::chrono::milliseconds(1000));
  o.world_size = 9;
  EXPECT_EQ(make_p2p_all_reduce_communicator(o, inner(), store).status().code(), absl::StatusCode::kInvalidArgument);
  o.world_size = 2;  // the inner communicator is a world of one
  EXPECT_EQ(make_p2p_all_reduce_communicator(o, inner(), store).status().code(), absl::StatusCode::kInvalidArgument);
  o.world_size = 1;
  o.max_bytes = 4;
  EXPECT_EQ(make_p2p_all_reduce_communicator(o, inner(), store).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_bytes = 4096;
  EXPECT_EQ(make_p2p_all_reduce_communicator(o, nullptr, store).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_blocks = -1;
  EXPECT_EQ(make_p2p_all_reduce_communicator(o, inner(), store).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_blocks = 0;
  // A world of one works: the sum is the part.
  auto one = make_p2p_all_reduce_communicator(o, inner(), store);
  ASSERT_TRUE(one.ok()) << one.status();
  Tensor host = random_f16(100, 4);
  Tensor t = to_device(host);
  ASSERT_TRUE((*one)->all_reduce_sum(t).ok());
  EXPECT_TRUE(same_bits(to_host(t, nullptr), host));
}

}  // namespace
}  // namespace exl3
