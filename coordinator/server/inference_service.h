// Inference service (inference.proto, exl3.v1): request conversion and validation, streaming of
// generated text, client cancellation and deadlines, tokenizer RPCs, model info and stats. The
// one place where absl::Status becomes grpc::Status for the public API. Every handler first checks
// the bearer token (when the server has one: UNAUTHENTICATED without it), then the request limits
// (INVALID_ARGUMENT naming the field and the limit; RESOURCE_EXHAUSTED when too many Generate
// calls are in flight, in total or on the caller's connection).
#pragma once

#include <functional>
#include <memory>
#include <random>

#include "coordinator/server/request_limits.h"
#include "coordinator/server/serving_loop.h"
#include "proto/inference.grpc.pb.h"

namespace exl3 {

class InferenceService final : public v1::Inference::Service {
 public:
  // `request_limits` resolved (resolve_request_limits); `auth_token` empty = no authentication.
  // `stats_extra` fills the per-worker part of StatsResponse (memory reported by the workers).
  InferenceService(const Tokenizer& tokenizer, ServingLoop& loop, ModelLimits limits, RequestLimits request_limits,
                   std::string auth_token, v1::ModelInfoResponse info,
                   std::function<void(v1::StatsResponse*)> stats_extra);

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateUnary(grpc::ServerContext* context, const v1::GenerateRequest* request,
                             v1::GenerateResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;
  grpc::Status ModelInfo(grpc::ServerContext* context, const v1::ModelInfoRequest* request,
                         v1::ModelInfoResponse* response) override;
  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest* request,
                     v1::StatsResponse* response) override;

 private:
  // Validates and submits; on success the request runs and `emit` receives every chunk.
  grpc::Status run(grpc::ServerContext* context, const v1::GenerateRequest& request,
                   const std::function<bool(const v1::GenerateResponse&)>& emit, bool stream);
  uint64_t random_seed();

  const Tokenizer& tokenizer_;
  ServingLoop& loop_;
  const ModelLimits limits_;
  const RequestLimits request_limits_;
  const std::string auth_token_;
  InFlightRequests in_flight_;
  const v1::ModelInfoResponse info_;
  std::function<void(v1::StatsResponse*)> stats_extra_;
  std::mutex seed_mu_;
  std::mt19937_64 seed_rng_{std::random_device{}()};
  std::atomic<uint64_t> next_request_id_{1};
};

// absl::Status -> grpc::Status with the same code and message.
grpc::Status to_grpc(const absl::Status& status);

}  // namespace exl3
