// CommandReader keeps a worker's session alive while its main thread is busy: a coordinator in
// another process pings the connection every 100 ms and closes it when a ping goes unanswered for
// 100 ms; the fake worker here holds a command for a second without touching gRPC. A synchronous
// gRPC client answers pings only while some thread is inside a call, so the session survives only
// because the reading thread waits in Read meanwhile. The coordinator runs in a child process
// forked before this process starts gRPC.
#include "worker/service/command_reader.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

namespace pb = control::v1;
using std::chrono::milliseconds;

// Sends a ping and then a shutdown, each answered before the next; counts the answers.
class PingThenShutdown final : public pb::Control::Service {
 public:
  grpc::Status Session(grpc::ServerContext*,
                       grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>* stream) override {
    pb::WorkerMessage message;
    if (!stream->Read(&message) || !message.has_hello()) return finish("no session hello");
    for (uint64_t id = 1; id <= 2; ++id) {
      pb::Command command;
      command.set_command_id(id);
      if (id == 1) {
        command.mutable_ping();
      } else {
        command.mutable_shutdown();
      }
      if (!stream->Write(command)) return finish(absl::StrCat("writing command ", id, " failed"));
      if (!stream->Read(&message) || !message.has_result() || message.result().command_id() != id) {
        return finish(absl::StrCat("no result for command ", id, " (the session broke)"));
      }
    }
    return finish("");
  }

  // The error ("" = both commands answered), once the session has ended or `timeout` passed.
  std::optional<std::string> wait(milliseconds timeout) {
    std::future<std::string> outcome = outcome_.get_future();
    if (outcome.wait_for(timeout) != std::future_status::ready) return std::nullopt;
    return outcome.get();
  }

 private:
  grpc::Status finish(const std::string& error) {
    outcome_.set_value(error);
    return error.empty() ? grpc::Status::OK : grpc::Status(grpc::StatusCode::ABORTED, error);
  }

  std::promise<std::string> outcome_;
};

// The child's whole life: serve one session with aggressive keepalive, report the port through
// `port_fd`, exit 0 when both commands were answered.
[[noreturn]] void run_coordinator(int port_fd) {
  PingThenShutdown service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 100);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 100);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) _exit(2);
  if (write(port_fd, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) _exit(2);
  close(port_fd);
  const std::optional<std::string> error = service.wait(milliseconds(30000));
  if (!error) std::fprintf(stderr, "coordinator: the session did not end within 30 s\n");
  if (error && !error->empty()) std::fprintf(stderr, "coordinator: %s\n", error->c_str());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  _exit(error && error->empty() ? 0 : 1);
}

// The child's exit status, or -1 when it has not exited within `timeout` (it is killed then).
int wait_child(pid_t pid, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Kills and reaps the child unless the test already waited for it.
struct ChildGuard {
  pid_t pid;
  ~ChildGuard() {
    if (pid > 0) wait_child(pid, milliseconds(0));
  }
};

bool send_result(CommandReader::Stream* stream, int64_t command_id) {
  pb::WorkerMessage reply;
  reply.mutable_result()->set_command_id(command_id);
  return stream->Write(reply);
}

TEST(CommandReader, SessionSurvivesACommandLongerThanTheKeepaliveTimeout) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    run_coordinator(pipe_fds[1]);
  }
  close(pipe_fds[1]);
  ChildGuard guard{child};
  pollfd ready{pipe_fds[0], POLLIN, 0};
  int port = 0;
  const bool got_port = poll(&ready, 1, 10000) == 1 && read(pipe_fds[0], &port, sizeof(port)) == sizeof(port);
  close(pipe_fds[0]);
  ASSERT_TRUE(got_port) << "the coordinator process did not report its port within 10 s";

  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto stub = pb::Control::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Session(&context);
  pb::WorkerMessage hello;
  hello.mutable_hello()->set_rank(0);
  ASSERT_TRUE(stream->Write(hello));
  {
    CommandReader reader(stream.get(), &context);
    const std::optional<pb::Command> ping = reader.next();
    ASSERT_TRUE(ping.has_value() && ping->has_ping()) << "expected the ping command first";
    // A command that keeps the main thread away from gRPC for ten keepalive periods.
    std::this_thread::sleep_for(milliseconds(1000));
    EXPECT_TRUE(send_result(stream.get(), ping->command_id())) << "the session broke during the command";
    const std::optional<pb::Command> shutdown = reader.next();
    ASSERT_TRUE(shutdown.has_value() && shutdown->has_shutdown()) << "expected the shutdown command second";
    EXPECT_TRUE(send_result(stream.get(), shutdown->command_id()));
    stream->WritesDone();
    EXPECT_FALSE(reader.next().has_value()) << "the coordinator ends the session after the shutdown";
    reader.stop();
  }
  const grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  guard.pid = 0;
  EXPECT_EQ(wait_child(child, milliseconds(10000)), 0) << "the coordinator saw the session break (its stderr says why)";
}

}  // namespace
}  // namespace exl3
