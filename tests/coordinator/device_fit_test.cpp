// check_plans_fit_devices: a CUDA rank whose plan needs more than its GPU's registered free memory
// is refused before loading, naming the rank, device, host, the plan's parts and the shortfall;
// a plan within the free memory (after the CUDA context the worker already holds) passes, and CPU
// workers are left to their backend's cap.
#include <string>
#include <vector>

#include "coordinator/server/device_fit.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kContext = uint64_t{600} << 20;

RankPlan plan_of(uint64_t weights, uint64_t cache, uint64_t workspace) {
  RankPlan p;
  p.weight_bytes = weights;
  p.cache_bytes = cache;
  p.workspace_bytes = workspace;
  return p;
}

control::v1::RegisterRequest reg(const std::string& backend, uint64_t free_bytes, int rank) {
  control::v1::RegisterRequest r;
  r.set_rank(rank);
  r.set_hostname("box");
  r.mutable_device()->set_backend(backend);
  r.mutable_device()->set_name(backend == "cuda" ? "NVIDIA GeForce RTX 3090" : "cpu (8 threads)");
  r.mutable_device()->set_free_bytes(static_cast<int64_t>(free_bytes));
  return r;
}

TEST(DeviceFit, PlansWithinFreeMemoryPass) {
  // Rank 1's plan is exactly its free memory plus the context the worker already made.
  const std::vector<RankPlan> plans = {plan_of(10 * kGiB, 8 * kGiB, 2 * kGiB), plan_of(12 * kGiB, 9 * kGiB, kGiB)};
  const std::vector<control::v1::RegisterRequest> regs = {reg("cuda", 23 * kGiB, 0),
                                                          reg("cuda", 22 * kGiB - kContext, 1)};
  EXPECT_TRUE(check_plans_fit_devices(plans, regs, kContext).ok());
  // One byte more than that is refused.
  const std::vector<control::v1::RegisterRequest> short_by_one = {reg("cuda", 23 * kGiB, 0),
                                                                  reg("cuda", 22 * kGiB - kContext - 1, 1)};
  EXPECT_FALSE(check_plans_fit_devices(plans, short_by_one, kContext).ok());
}

TEST(DeviceFit, OverTheFreeMemoryIsRefusedByRank) {
  // 24 GiB planned (as --split 24 lets the cache grow to) on a GPU with 23.25 GiB free: 23.41 GiB
  // beyond the context, 168 MiB short.
  const std::vector<RankPlan> plans = {plan_of(10 * kGiB, 8 * kGiB, 2 * kGiB), plan_of(14 * kGiB, 8 * kGiB, 2 * kGiB)};
  const std::vector<control::v1::RegisterRequest> regs = {reg("cuda", 23 * kGiB, 0),
                                                          reg("cuda", 23 * kGiB + kGiB / 4, 1)};
  const absl::Status st = check_plans_fit_devices(plans, regs, kContext);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(st.message());
  EXPECT_NE(msg.find("rank 1 (NVIDIA GeForce RTX 3090 on box): the plan puts 24.00 GiB there (weights 14.00 GiB, "
                     "KV cache 8.00 GiB, workspace and fixed costs 2.00 GiB; 23.41 GiB beyond the CUDA context"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("the GPU has 23.25 GiB free: lower its --split cap by at least 168.00 MiB"), std::string::npos)
      << msg;
}

TEST(DeviceFit, CpuWorkersAreLeftToTheirCap) {
  const std::vector<RankPlan> plans = {plan_of(40 * kGiB, 8 * kGiB, 2 * kGiB)};
  EXPECT_TRUE(check_plans_fit_devices(plans, {reg("cpu", 16 * kGiB, 0)}, kContext).ok());
}

}  // namespace
}  // namespace exl3
