// exl3-client health: the standard grpc.health.v1 Check, called by method name through a
// generic stub with the locally compiled messages of health_check.proto.
#include <chrono>
#include <cstdio>

#include "client/commands.h"
#include "client/health_check.pb.h"
#include "client/rpc_util.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace exl3::client {

int run_health(const ClientConfig& config, const std::string& service) {
  using Request = exl3::client::health::HealthCheckRequest;
  using Response = exl3::client::health::HealthCheckResponse;
  grpc::TemplatedGenericStub<Request, Response> stub(make_channel(config));
  grpc::ClientContext context;
  set_deadline(context, config);
  grpc::CompletionQueue queue;
  Request request;
  request.set_service(service);
  Response response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> call =
      stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &queue);
  call->StartCall();
  call->Finish(&response, &status, nullptr);

  // The context's deadline ends the call; the extra 5 s only guard against a queue that never
  // delivers, in which case the call is cancelled (cancellation completes it promptly).
  const auto wait_until = context.deadline() + std::chrono::seconds(5);
  void* tag = nullptr;
  bool ok = false;
  bool finished = queue.AsyncNext(&tag, &ok, wait_until) == grpc::CompletionQueue::GOT_EVENT;
  if (!finished) {
    context.TryCancel();
    finished = queue.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::seconds(5)) ==
               grpc::CompletionQueue::GOT_EVENT;
  }
  queue.Shutdown();
  while (queue.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + std::chrono::seconds(1)) ==
         grpc::CompletionQueue::GOT_EVENT) {
  }
  if (!finished) {
    return report_rpc_error("health", grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the call never completed"));
  }
  if (!status.ok()) return report_rpc_error("health", status);
  std::printf("%s\n", Response::ServingStatus_Name(response.status()).c_str());
  return response.status() == Response::SERVING ? kExitOk : kExitRpcError;
}

}  // namespace exl3::client
