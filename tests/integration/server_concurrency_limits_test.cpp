// Concurrent Generate calls against --max-requests 3 --max-requests-per-connection 2: on one
// connection the second long stream runs and the third is refused with RESOURCE_EXHAUSTED naming
// --max-requests-per-connection 2; another connection takes the third slot and its second call is
// refused naming --max-requests 3; once the streams are cancelled the slots are free again. Each
// channel has its own subchannel pool, so each is its own TCP connection (one gRPC peer).
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A long stream that stays open until cancelled.
struct OpenStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
};

class ServerConcurrencyLimits : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.max_seq_len = 2048;
    config.max_batch = 8;
    config.log_name = "server_concurrency_limits";
    config.extra_args = {"--max-requests", "3", "--max-requests-per-connection", "2"};
    start_server(config);
  }

  // A channel on a connection of its own.
  std::shared_ptr<grpc::Channel> own_connection() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(server().address(), grpc::InsecureChannelCredentials(), args);
  }

  // Starts a 2000-token stream (seconds of work on CPU workers) and waits for its first response,
  // so that the server counts it; nullptr (with a test failure) when it does not start.
  static std::unique_ptr<OpenStream> open_long_stream(v1::Inference::Stub& stub) {
    v1::GenerateRequest r = greedy(text_request("Once upon a time", 2000));
    r.mutable_stopping()->set_ignore_eos(true);
    auto s = std::make_unique<OpenStream>();
    set_timeout(s->context, seconds(120));
    s->reader = stub.Generate(&s->context, r);
    v1::GenerateResponse first;
    if (!s->reader->Read(&first)) {
      ADD_FAILURE() << "the long stream ended at once: " << describe(s->reader->Finish());
      return nullptr;
    }
    return s;
  }

  static void cancel(std::vector<std::unique_ptr<OpenStream>>& streams) {
    for (auto& s : streams) {
      if (!s) continue;
      s->context.TryCancel();
      v1::GenerateResponse ignored;
      while (s->reader->Read(&ignored)) {
      }
      const grpc::Status status = s->reader->Finish();
      EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << describe(status);
    }
    streams.clear();
  }
};

TEST_F(ServerConcurrencyLimits, PerConnectionThenTotal) {
  auto channel_a = own_connection();
  auto channel_b = own_connection();
  auto stub_a = v1::Inference::NewStub(channel_a);
  auto stub_b = v1::Inference::NewStub(channel_b);
  std::vector<std::unique_ptr<OpenStream>> open;
  open.push_back(open_long_stream(*stub_a));
  open.push_back(open_long_stream(*stub_a));  // at the per-connection limit: runs
  ASSERT_TRUE(open[0] && open[1]);

  const StreamResult third_on_a = stream_generate(*stub_a, text_request("Hello", 4), seconds(10));
  EXPECT_EQ(third_on_a.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << describe(third_on_a.status);
  EXPECT_NE(third_on_a.status.error_message().find("--max-requests-per-connection 2"), std::string::npos)
      << third_on_a.status.error_message();
  {
    grpc::ClientContext context;
    set_timeout(context, seconds(10));
    v1::GenerateResponse response;
    const grpc::Status unary = stub_a->GenerateUnary(&context, text_request("Hello", 4), &response);
    EXPECT_EQ(unary.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << describe(unary);
  }
  // Calls other than Generate are not counted.
  v1::StatsResponse s;
  EXPECT_TRUE(stats(*stub_a, &s).ok());

  open.push_back(open_long_stream(*stub_b));  // the third in total: at the limit, runs
  ASSERT_TRUE(open[2]);
  const StreamResult fourth = stream_generate(*stub_b, text_request("Hello", 4), seconds(10));
  EXPECT_EQ(fourth.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << describe(fourth.status);
  EXPECT_NE(fourth.status.error_message().find("--max-requests 3"), std::string::npos)
      << fourth.status.error_message();

  cancel(open);
  // The cancelled calls give their slots back when their handlers return (within the serving
  // loop's 50 ms poll); two at once on one connection run again.
  const auto deadline = TestClock::now() + seconds(10);
  StreamResult again;
  while (true) {
    again = stream_generate(*stub_a, greedy(text_request("Hello", 4)), seconds(30));
    if (again.status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED || TestClock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(again.status.ok()) << describe(again.status);
  open.push_back(open_long_stream(*stub_a));
  open.push_back(open_long_stream(*stub_a));
  EXPECT_TRUE(open[0] && open[1]);
  cancel(open);
}

}  // namespace
}  // namespace exl3::testing
