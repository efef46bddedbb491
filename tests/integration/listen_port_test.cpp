// listen_port.h without a model: with port sharing off (as every coordinator server runs), a
// second gRPC server on a bound port fails to start instead of listening beside the first; the
// start-up probe names HOST:PORT and what the port is for, and lets free ports and port 0 through.
#include "coordinator/server/listen_port.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"

namespace exl3 {
namespace {

std::unique_ptr<grpc::Server> start_server(const std::string& address, int* port) {
  static v1::Inference::Service service;  // every method UNIMPLEMENTED; a server needs one service
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  disable_port_sharing(builder);
  return builder.BuildAndStart();
}

TEST(ListenPort, SecondServerOnABoundPortDoesNotStart) {
  int first_port = 0;
  std::unique_ptr<grpc::Server> first = start_server("127.0.0.1:0", &first_port);
  ASSERT_TRUE(first != nullptr);
  ASSERT_GT(first_port, 0);
  int second_port = -1;
  std::unique_ptr<grpc::Server> second = start_server(absl::StrCat("127.0.0.1:", first_port), &second_port);
  EXPECT_TRUE(second == nullptr || second_port == 0) << "a second server listens on " << first_port;
  if (second) second->Shutdown();
  first->Shutdown();
}

TEST(ListenPort, ProbeNamesABoundPort) {
  int port = 0;
  std::unique_ptr<grpc::Server> server = start_server("127.0.0.1:0", &port);
  ASSERT_TRUE(server != nullptr);
  const absl::Status s = check_port_free("127.0.0.1", port, "public API, --port");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(absl::StrCat("127.0.0.1:", port, " (public API, --port) is already in use")),
            std::string::npos)
      << s;
  server->Shutdown();
  server.reset();
  // Free again once the server is gone (SO_REUSEADDR: connections in TIME_WAIT do not count).
  EXPECT_TRUE(check_port_free("127.0.0.1", port, "public API, --port").ok());
  EXPECT_TRUE(check_port_free("127.0.0.1", 0, "public API, --port").ok());
}

}  // namespace
}  // namespace exl3
