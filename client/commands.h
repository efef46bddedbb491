// The subcommands of exl3-client, each one RPC against the public API (or the standard health
// service). Each prints its result to stdout and returns the process exit code: 0 on success,
// 1 when the call fails (the gRPC status code name and message go to stderr).
#pragma once

#include <string>

#include "proto/inference.pb.h"

namespace exl3::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRpcError = 1;
inline constexpr int kExitUsage = 2;

struct ClientConfig {
  std::string server = "127.0.0.1:50051";
  // Deadline of every call, from when it is sent.
  double timeout_s = 600;
  // Sent as "authorization: Bearer <token>" on every call when not empty.
  std::string auth_token;
  // TLS: verify the server with tls_ca_pem, or with the system's roots when it is empty.
  bool tls = false;
  std::string tls_ca_pem;
};

// Streams the completion text to stdout as it arrives (or, with json, each response as one line
// of JSON), then prints the summary line to stderr.
int run_generate(const ClientConfig& config, const exl3::v1::GenerateRequest& request, bool json);
// Prints the ids as "1,2,3" (the form --tokens and detokenize accept).
int run_tokenize(const ClientConfig& config, const exl3::v1::TokenizeRequest& request, bool json);
int run_detokenize(const ClientConfig& config, const exl3::v1::DetokenizeRequest& request, bool json);
int run_info(const ClientConfig& config, bool json);
int run_stats(const ClientConfig& config, bool json);
// grpc.health.v1 Check of `service` ("" = the whole server): prints the serving status and
// returns 0 only for SERVING.
int run_health(const ClientConfig& config, const std::string& service);

}  // namespace exl3::client
