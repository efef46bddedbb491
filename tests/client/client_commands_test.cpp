// Tests of exl3-client's commands against an in-process fake of the public API (port 0) with
// gRPC's default health service: streamed text and the summary line, JSON lines, tokenize output,
// the shard table, the health check through the locally compiled messages, and error reporting.
#include <memory>
#include <string>

#include "client/commands.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"

namespace exl3::client {
namespace {

class FakeInference final : public exl3::v1::Inference::Service {
 public:
  grpc::Status Generate(grpc::ServerContext*, const exl3::v1::GenerateRequest* request,
                        grpc::ServerWriter<exl3::v1::GenerateResponse>* writer) override {
    if (request->prompt() == "fail") return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "top_p must be in (0, 1]");
    exl3::v1::GenerateResponse r;
    r.set_text("Hel");
    r.add_token_ids(1);
    writer->Write(r);
    r.Clear();
    r.set_text("lo");
    r.add_token_ids(2);
    r.add_token_ids(3);
    r.set_finish_reason(exl3::v1::FINISH_REASON_STOP_STRING);
    writer->Write(r);
    return grpc::Status::OK;
  }
  grpc::Status Tokenize(grpc::ServerContext*, const exl3::v1::TokenizeRequest* request,
                        exl3::v1::TokenizeResponse* response) override {
    if (!request->has_add_bos() || request->add_bos()) response->add_ids(0);
    for (unsigned char c : request->text()) response->add_ids(c);
    return grpc::Status::OK;
  }
  grpc::Status ModelInfo(grpc::ServerContext*, const exl3::v1::ModelInfoRequest*,
                         exl3::v1::ModelInfoResponse* response) override {
    response->set_architecture("LlamaForCausalLM");
    exl3::v1::RankShard* s = response->add_shards();
    s->set_device("cpu");
    s->set_end_layer(2);
    return grpc::Status::OK;
  }
};

class ClientCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
    ASSERT_GT(port, 0);
    config_.server = "127.0.0.1:" + std::to_string(port);
    config_.timeout_s = 10;
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  FakeInference service_;
  std::unique_ptr<grpc::Server> server_;
  ClientConfig config_;
};

TEST_F(ClientCommandsTest, GenerateStreamsTextAndSummary) {
  exl3::v1::GenerateRequest request;
  request.set_prompt("hi");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = run_generate(config_, request, false);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitOk);
  EXPECT_EQ(out, "Hello");
  EXPECT_NE(err.find("3 tokens in "), std::string::npos) << err;
  EXPECT_NE(err.find("finish reason stop_string"), std::string::npos) << err;
}

TEST_F(ClientCommandsTest, GenerateJsonLines) {
  exl3::v1::GenerateRequest request;
  request.set_prompt("hi");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = run_generate(config_, request, true);
  const std::string out = ::testing::internal::GetCapturedStdout();
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitOk);
  EXPECT_EQ(out,
            "{\"text\":\"Hel\",\"token_ids\":[1]}\n"
            "{\"text\":\"lo\",\"token_ids\":[2,3],\"finish_reason\":\"FINISH_REASON_STOP_STRING\"}\n");
}

TEST_F(ClientCommandsTest, GenerateErrorNamesTheCode) {
  exl3::v1::GenerateRequest request;
  request.set_prompt("fail");
  ::testing::internal::CaptureStderr();
  const int rc = run_generate(config_, request, false);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitRpcError);
  EXPECT_EQ(err, "error: generate: INVALID_ARGUMENT: top_p must be in (0, 1]\n");
}

TEST_F(ClientCommandsTest, TokenizeAndInfo) {
  exl3::v1::TokenizeRequest request;
  request.set_text("AB");
  request.set_add_bos(false);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_tokenize(config_, request, false), kExitOk);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "65,66\n");

  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_info(config_, false), kExitOk);
  const std::string info = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(info.find("architecture      LlamaForCausalLM\n"), std::string::npos) << info;
  EXPECT_NE(info.find("shard plan (1 rank):\n"), std::string::npos) << info;
  EXPECT_NE(info.find("[0, 2)"), std::string::npos) << info;
}

TEST_F(ClientCommandsTest, StatsUnimplementedIsAnError) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_stats(config_, false), kExitRpcError);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("error: stats: UNIMPLEMENTED"), std::string::npos);
}

TEST_F(ClientCommandsTest, HealthCheck) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_health(config_, ""), kExitOk);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "SERVING\n");

  server_->GetHealthCheckService()->SetServingStatus(false);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_health(config_, ""), kExitRpcError);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "NOT_SERVING\n");

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_health(config_, "no.such.Service"), kExitRpcError);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("error: health: NOT_FOUND"), std::string::npos);
}

TEST(ClientCommands, UnreachableServerIsUnavailable) {
  ClientConfig config;
  config.server = "127.0.0.1:1";  // nothing listens on port 1
  config.timeout_s = 5;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_info(config, false), kExitRpcError);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("error: info: UNAVAILABLE"), std::string::npos);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run_health(config, ""), kExitRpcError);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("error: health: UNAVAILABLE"), std::string::npos);
}

}  // namespace
}  // namespace exl3::client
