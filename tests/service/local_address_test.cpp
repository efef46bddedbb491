// The local interface address toward a peer, and HOST:PORT parsing (worker/service/local_address.h).
#include "worker/service/local_address.h"

#include "gtest/gtest.h"

namespace exl3 {
namespace {

TEST(LocalAddress, TowardLoopbackIsLoopback) {
  const absl::StatusOr<std::string> v4 = local_address_toward("127.0.0.1", 50051);
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(*v4, "127.0.0.1");
  const absl::StatusOr<std::string> name = local_address_toward("localhost", 50051);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_TRUE(*name == "127.0.0.1" || *name == "::1") << *name;
}

TEST(LocalAddress, UnresolvableHostIsNamed) {
  const absl::StatusOr<std::string> r = local_address_toward("no-such-host.invalid", 50051);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no-such-host.invalid"), std::string_view::npos) << r.status();
}

TEST(LocalAddress, SplitsHostAndPort) {
  auto a = split_host_port("10.0.0.2:7000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "10.0.0.2");
  EXPECT_EQ(a->second, 7000);
  auto b = split_host_port("[fd00::1]:443");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "fd00::1");
  EXPECT_EQ(b->second, 443);
  for (const char* bad : {"nohost", ":80", "host:", "host:0", "host:70000", "[fd00::1]443", "host:8x"}) {
    const auto r = split_host_port(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string_view::npos) << r.status();
    }
  }
}

}  // namespace
}  // namespace exl3
