// WorkerGroup against fake workers over a real gRPC control server in this process: a worker that
// stops reading its session makes the coordinator's writes block; the write watchdog must fail
// the call with DEADLINE_EXCEEDED within the call's deadline instead of hanging.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/server/control_service.h"
#include "coordinator/server/worker_group.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

using Clock = std::chrono::steady_clock;

struct ControlServer {
  std::shared_ptr<WorkerGroup> group;
  ControlService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  explicit ControlServer(int world) : group(std::make_shared<WorkerGroup>(world, "test-run")) {
    service.set_group(group);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~ControlServer() {
    group->shutdown("test over", std::chrono::milliseconds(500));
    service.close_store();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
};

// A fake worker: registers, opens its session and says hello, then reads nothing.
struct SilentWorker {
  std::unique_ptr<pb::Control::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WorkerMessage, pb::Command>> session;

  SilentWorker(int port, int rank, int world) {
    stub = pb::Control::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext reg_context;
    pb::RegisterRequest reg;
    reg.set_rank(rank);
    reg.set_world_size(world);
    pb::RegisterResponse response;
    const grpc::Status s = stub->Register(&reg_context, reg, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    session = stub->Session(&context);
    pb::WorkerMessage hello;
    hello.mutable_hello()->set_rank(rank);
    hello.mutable_hello()->set_run_id(response.run_id());
    EXPECT_TRUE(session->Write(hello));
  }
  ~SilentWorker() { context.TryCancel(); }
};

TEST(WorkerGroup, WriteToAWorkerThatStopsReadingTimesOut) {
  ControlServer control(1);
  ASSERT_NE(control.server, nullptr);
  SilentWorker worker(control.port, 0, 1);
  ASSERT_TRUE(control.group->wait_ready(std::chrono::seconds(10)).ok());

  // A ~48 MB command outgrows gRPC's flow-control window (at most 16 MB): the write blocks while
  // the worker does not read. The call must end by its deadline (plus the watchdog's reaction)
  // with the write named as the cause, never hang.
  pb::Command big;
  for (int i = 0; i < 6 << 20; ++i) big.mutable_release()->add_seq_ids(0x7FFFFFFFFFFFFFFFull - i);
  constexpr auto kTimeout = std::chrono::milliseconds(1500);
  const auto t0 = Clock::now();
  const absl::StatusOr<std::vector<pb::CommandResult>> r = control.group->call_all(big, kTimeout);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(seconds, 4.0) << "the call took " << seconds << " s";
  ASSERT_FALSE(r.ok()) << "the silent worker answered";
  const absl::Status failure = r.status();
  EXPECT_EQ(failure.code(), absl::StatusCode::kDeadlineExceeded) << failure;
  EXPECT_NE(failure.message().find("not reading"), std::string::npos) << failure;
  // The group stays failed: later calls return at once.
  const auto t1 = Clock::now();
  EXPECT_FALSE(control.group->call_all(big, kTimeout).ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 0.5);
}

}  // namespace
}  // namespace exl3
