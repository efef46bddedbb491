// The control service with a cluster secret, over real gRPC on loopback: every one of its four
// RPCs refuses a caller without the secret or with a wrong one (UNAUTHENTICATED, naming the flag
// and the peer, never the secret), a refused Register leaves the rank free for the right worker,
// the rendezvous store and the session work with the secret, and without a secret nothing changes.
#include "coordinator/server/control_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "worker/comm/cluster_secret.h"

namespace exl3 {
namespace {

constexpr char kSecret[] = "5f0c1d2e3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f";
constexpr char kWrong[] = "5f0c1d2e3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e40";

std::chrono::system_clock::time_point in_seconds(int s) {
  return std::chrono::system_clock::now() + std::chrono::seconds(s);
}

class ControlSecretTest : public ::testing::Test {
 protected:
  void start(const std::string& secret) {
    group_ = std::make_shared<WorkerGroup>(1, "run-secret-test");
    service_.set_group(group_);
    service_.set_cluster_secret(secret);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port_ > 0);
  }
  void TearDown() override {
    service_.close_store();
    if (server_) server_->Shutdown(in_seconds(2));
  }

  std::unique_ptr<pb::Control::Stub> stub(const std::string& secret) {
    return pb::Control::NewStub(
        make_control_channel("127.0.0.1:" + std::to_string(port_), grpc::ChannelArguments(), secret));
  }

  grpc::Status register_rank0(pb::Control::Stub& s, pb::RegisterResponse* response) {
    pb::RegisterRequest request;
    request.set_rank(0);
    request.set_world_size(1);
    request.set_hostname("test-host");
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    return s.Register(&ctx, request, response);
  }

  grpc::Status store_set(pb::Control::Stub& s, const std::string& key, const std::string& value) {
    pb::StoreSetRequest request;
    request.set_key(key);
    request.set_value(value);
    pb::StoreSetResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    return s.StoreSet(&ctx, request, &response);
  }

  grpc::Status store_get(pb::Control::Stub& s, const std::string& key, pb::StoreGetResponse* response) {
    pb::StoreGetRequest request;
    request.add_keys(key);
    request.set_timeout_ms(200);
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    return s.StoreGet(&ctx, request, response);
  }

  // Opens a session, says hello and returns how the server ended it (within 10 s).
  grpc::Status session(pb::Control::Stub& s) {
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    auto stream = s.Session(&ctx);
    pb::WorkerMessage hello;
    hello.mutable_hello()->set_rank(0);
    hello.mutable_hello()->set_run_id("run-secret-test");
    stream->Write(hello);
    stream->WritesDone();
    pb::Command cmd;
    while (stream->Read(&cmd)) {
    }
    return stream->Finish();
  }

  // UNAUTHENTICATED naming the flag, the peer and `what` ("missing" / "wrong"); no secret in it.
  static void expect_refused(const grpc::Status& s, const std::string& what, const std::string& call) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << call << ": " << s.error_message();
    const std::string& m = s.error_message();
    EXPECT_NE(m.find("cluster secret " + what), std::string::npos) << call << ": " << m;
    EXPECT_NE(m.find("--cluster-secret-file"), std::string::npos) << call << ": " << m;
    EXPECT_NE(m.find("127.0.0.1"), std::string::npos) << call << " (peer): " << m;
    EXPECT_EQ(m.find(kSecret), std::string::npos) << call << " leaks the secret: " << m;
    EXPECT_EQ(m.find(kWrong), std::string::npos) << call << " leaks the caller's value: " << m;
  }

  ControlService service_;
  std::shared_ptr<WorkerGroup> group_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(ControlSecretTest, EveryRpcRefusesAMissingOrWrongSecret) {
  start(kSecret);
  for (const auto& [secret, what] : {std::pair<std::string, std::string>{"", "missing"}, {kWrong, "wrong"}}) {
    auto s = stub(secret);
    pb::RegisterResponse reg;
    expect_refused(register_rank0(*s, &reg), what, "Register");
    EXPECT_TRUE(reg.run_id().empty()) << "a refused Register got the run id";
    expect_refused(store_set(*s, "k", "v"), what, "StoreSet");
    pb::StoreGetResponse got;
    expect_refused(store_get(*s, "k", &got), what, "StoreGet");
    EXPECT_EQ(got.values_size(), 0);
    expect_refused(session(*s), what, "Session");
  }
  // Nothing the refused callers sent reached the store.
  auto right = stub(kSecret);
  pb::StoreGetResponse got;
  EXPECT_EQ(store_get(*right, "k", &got).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(ControlSecretTest, RefusedRegisterLeavesTheRankToTheRightWorker) {
  start(kSecret);
  pb::RegisterResponse reg;
  EXPECT_EQ(register_rank0(*stub(""), &reg).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(register_rank0(*stub(kWrong), &reg).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_EQ(group_->registrations().size(), 1u);
  EXPECT_TRUE(group_->registrations()[0].hostname().empty()) << "a refused Register was recorded";
  auto right = stub(kSecret);
  const grpc::Status s = register_rank0(*right, &reg);
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(reg.run_id(), "run-secret-test");
  // The store works for the right worker, and a second Register of rank 0 is the usual refusal.
  ASSERT_TRUE(store_set(*right, "key", "value").ok());
  pb::StoreGetResponse got;
  const grpc::Status g = store_get(*right, "key", &got);
  ASSERT_TRUE(g.ok()) << g.error_message();
  ASSERT_EQ(got.values_size(), 1);
  EXPECT_EQ(got.values(0), "value");
  EXPECT_EQ(register_rank0(*right, &reg).error_code(), grpc::StatusCode::ALREADY_EXISTS);
}

TEST_F(ControlSecretTest, WithoutASecretAnyCallerIsServed) {
  start("");
  auto anyone = stub("");
  pb::RegisterResponse reg;
  const grpc::Status s = register_rank0(*anyone, &reg);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reg.run_id(), "run-secret-test");
  EXPECT_TRUE(store_set(*stub("some-secret"), "k", "v").ok()) << "a secret the server does not ask for is ignored";
  pb::StoreGetResponse got;
  ASSERT_TRUE(store_get(*anyone, "k", &got).ok());
  EXPECT_EQ(got.values(0), "v");
}

}  // namespace
}  // namespace exl3
