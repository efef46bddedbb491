// CpuBackend::allocate on requests it cannot serve: over its cap, larger than any host can give,
// or a size that overflows 64 bits each come back as RESOURCE_EXHAUSTED naming the tensor, never
// as an exception (a CPU worker or exl3-bench sized past the machine used to die of bad_alloc).
#include <cstdint>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace exl3 {
namespace {

TEST(CpuBackendAllocate, ZeroedAndCounted) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  auto t = be->allocate(DType::kF32, {3, 5}, "small");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(be->allocated_bytes(), 60u);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(t->data<float>()[i], 0.0f);
  *t = Tensor();
  EXPECT_EQ(be->allocated_bytes(), 0u);
}

TEST(CpuBackendAllocate, OverTheCapNamesTheTensor) {
  const std::unique_ptr<Backend> be = make_cpu_backend(1 << 20);
  auto t = be->allocate(DType::kF32, {1024, 512}, "the KV cache");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(t.status().message());
  EXPECT_NE(msg.find("the KV cache (2.00 MiB) would exceed the cap of 1.00 MiB"), std::string::npos) << msg;
  EXPECT_EQ(be->allocated_bytes(), 0u);
}

// 4 PiB: past the 47-bit user address space of x86-64 and the 48-bit one of arm64, so operator new
// fails whatever the kernel's overcommit policy.
TEST(CpuBackendAllocate, MoreThanTheHostHasIsAnError) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  auto t = be->allocate(DType::kF32, {int64_t{1} << 30, int64_t{1} << 20}, "layer 3 k cache");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(t.status().message());
  EXPECT_NE(msg.find("allocating layer 3 k cache (4294967296.00 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of host memory"), std::string::npos) << msg;
  EXPECT_EQ(be->allocated_bytes(), 0u);
}

TEST(CpuBackendAllocate, SizeOverflowIsAnError) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  auto t = be->allocate(DType::kF32, {int64_t{1} << 40, int64_t{1} << 30}, "scratch");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(t.status().message());
  EXPECT_NE(msg.find("scratch [1099511627776, 1073741824]: the size overflows 64 bits"), std::string::npos) << msg;
}

}  // namespace
}  // namespace exl3
