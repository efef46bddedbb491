// Client-side helpers of the integration tests: exl3.v1 calls with a deadline on every one, a
// streaming Generate collected into one result (messages, tokens, text, finish reason, usage,
// timings), and builders for the requests the tests send. Header-only (see launched_server.h).
#pragma once

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/health_check.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/status.h"
#include "proto/inference.grpc.pb.h"

namespace exl3::testing {

using CallClock = std::chrono::steady_clock;

inline void set_timeout(grpc::ClientContext& context, std::chrono::milliseconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

using HealthResponse = client::health::HealthCheckResponse;
using HealthStatus = HealthResponse::ServingStatus;

// grpc.health.v1 Check of the whole server (service ""), called by method name with the messages
// the client library compiles. The context deadline ends the call; the wait on its completion
// has a deadline of its own in case the callback never runs.
inline grpc::Status health_check(const std::shared_ptr<grpc::Channel>& channel, HealthStatus* status,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  using Request = client::health::HealthCheckRequest;
  grpc::TemplatedGenericStub<Request, HealthResponse> stub(channel);
  grpc::ClientContext context;
  set_timeout(context, timeout);
  Request request;
  HealthResponse response;
  std::promise<grpc::Status> done;
  std::future<grpc::Status> result = done.get_future();
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  if (result.wait_for(timeout + std::chrono::seconds(5)) != std::future_status::ready) {
    context.TryCancel();
    // Cancellation completes the call promptly; the callback must have run before the locals go.
    if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) std::abort();
  }
  const grpc::Status s = result.get();
  *status = response.status();
  return s;
}

// One streaming Generate, read to its end.
struct StreamResult {
  grpc::Status status;
  int messages = 0;  // responses received
  std::vector<int32_t> tokens;
  std::string text;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  bool has_usage = false;
  v1::Usage usage;
  // Messages other than the last that carried a finish reason or usage (must stay 0).
  int early_final_fields = 0;
  std::string request_id;
  CallClock::time_point started;
  std::optional<CallClock::time_point> first_message;
  CallClock::time_point finished;  // when the final status arrived
};

// Runs Generate with a deadline of `timeout`; `on_message` (optional) sees every response as it
// arrives, from the calling thread.
inline StreamResult stream_generate(v1::Inference::Stub& stub, const v1::GenerateRequest& request,
                                    std::chrono::milliseconds timeout,
                                    const std::function<void(const v1::GenerateResponse&)>& on_message = {}) {
  StreamResult out;
  grpc::ClientContext context;
  set_timeout(context, timeout);
  out.started = CallClock::now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  bool seen_final = false;
  while (reader->Read(&response)) {
    if (!out.first_message) out.first_message = CallClock::now();
    if (seen_final) ++out.early_final_fields;
    ++out.messages;
    out.request_id = response.request_id();
    out.tokens.insert(out.tokens.end(), response.token_ids().begin(), response.token_ids().end());
    out.text += response.text();
    if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED || response.has_usage()) {
      seen_final = true;
      out.finish_reason = response.finish_reason();
      out.has_usage = response.has_usage();
      out.usage = response.usage();
    }
    if (on_message) on_message(response);
  }
  out.status = reader->Finish();
  out.finished = CallClock::now();
  return out;
}

inline grpc::Status tokenize(v1::Inference::Stub& stub, const std::string& text, std::vector<int32_t>* ids,
                             std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  grpc::ClientContext context;
  set_timeout(context, timeout);
  v1::TokenizeRequest request;
  request.set_text(text);
  v1::TokenizeResponse response;
  const grpc::Status status = stub.Tokenize(&context, request, &response);
  ids->assign(response.ids().begin(), response.ids().end());
  return status;
}

inline grpc::Status detokenize(v1::Inference::Stub& stub, const std::vector<int32_t>& ids, std::string* text,
                               std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  grpc::ClientContext context;
  set_timeout(context, timeout);
  v1::DetokenizeRequest request;
  request.mutable_ids()->Add(ids.begin(), ids.end());
  v1::DetokenizeResponse response;
  const grpc::Status status = stub.Detokenize(&context, request, &response);
  *text = response.text();
  return status;
}

inline grpc::Status stats(v1::Inference::Stub& stub, v1::StatsResponse* response,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  grpc::ClientContext context;
  set_timeout(context, timeout);
  return stub.Stats(&context, v1::StatsRequest(), response);
}

inline grpc::Status generate_unary(v1::Inference::Stub& stub, const v1::GenerateRequest& request,
                                   v1::GenerateResponse* response, std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  set_timeout(context, timeout);
  return stub.GenerateUnary(&context, request, response);
}

inline v1::GenerateRequest text_request(const std::string& prompt, int max_new_tokens) {
  v1::GenerateRequest r;
  r.set_prompt(prompt);
  r.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  return r;
}

inline v1::GenerateRequest token_request(const std::vector<int32_t>& ids, int max_new_tokens) {
  v1::GenerateRequest r;
  r.mutable_prompt_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  r.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  return r;
}

inline v1::GenerateRequest greedy(v1::GenerateRequest r) {
  r.mutable_sampling()->set_temperature(0.0f);
  return r;
}

inline std::string code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    default:
      return "code " + std::to_string(static_cast<int>(code));
  }
}

// "CODE: message" for assertion output.
inline std::string describe(const grpc::Status& status) {
  return code_name(status.error_code()) + ": " + status.error_message();
}

}  // namespace exl3::testing
