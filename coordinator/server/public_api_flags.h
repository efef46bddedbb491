// The public API's flags, shared by exl3-launch and exl3-coordinator: request limits (and the
// scheduler's queue length), bearer-token authentication and TLS. add_public_api_flags() declares them; after parsing,
// apply_public_api_flags() reads the token and key files once (refusing unreadable, empty or
// malformed ones by flag and path) and stores everything in the coordinator's options as values.
// Header-only: only the two mains use CLI11.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "coordinator/server/coordinator.h"

namespace exl3 {

struct PublicApiFiles {
  std::string auth_token_file;
  std::string tls_cert;
  std::string tls_key;
};

inline void add_public_api_flags(CLI::App& app, CoordinatorOptions& options, PublicApiFiles& files) {
  const char* group = "Public API limits and security";
  RequestLimits& l = options.request_limits;
  app.add_option("--max-stop-strings", l.max_stop_strings, "Most stop strings in one request")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(group);
  app.add_option("--max-stop-string-bytes", l.max_stop_string_bytes, "Most bytes of one request's stop strings together")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(group);
  app.add_option("--max-banned-strings", l.max_banned_strings, "Most banned strings (sampling.banned_strings) in one request")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(group);
  app.add_option("--max-banned-string-bytes", l.max_banned_string_bytes,
                 "Most bytes of one request's banned strings together")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(group);
  app.add_option("--max-prompt-bytes", l.max_prompt_bytes, "Most bytes of a text prompt (and of Tokenize's text)")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(group);
  app.add_option("--max-prompt-tokens", l.max_prompt_tokens,
                 "Most prompt tokens (BOS included) of one request (default: --max-seq-len, the context)")
      ->check(CLI::NonNegativeNumber)->group(group);
  app.add_option("--max-new-tokens", l.max_new_tokens,
                 "Largest max_new_tokens a request may ask for; also caps the default of requests that leave it "
                 "unset (default: --max-seq-len, the context)")
      ->check(CLI::NonNegativeNumber)->group(group);
  app.add_option("--max-request-id-bytes", l.max_request_id_bytes, "Longest request_id in bytes")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(group);
  app.add_option("--max-requests", l.max_requests,
                 "Most Generate calls in flight (queued or running) from all clients; more are refused with "
                 "RESOURCE_EXHAUSTED")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(group);
  app.add_option("--max-requests-per-connection", l.max_requests_per_connection,
                 "Most Generate calls in flight on one client connection (0 = no such limit); more are refused with "
                 "RESOURCE_EXHAUSTED")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(group);
  app.add_option("--max-queue", options.max_queue,
                 "Most requests waiting for a place in the batch (the scheduler's max_queue); more are refused with "
                 "RESOURCE_EXHAUSTED")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(group);
  app.add_option("--auth-token-file", files.auth_token_file,
                 "File holding a bearer token: every exl3.v1 call (Generate, ModelInfo, Stats, Tokenize, ...) must "
                 "then carry the metadata \"authorization: Bearer <token>\" or gets UNAUTHENTICATED; the "
                 "grpc.health.v1 health service and server reflection stay open. An empty or unreadable file is "
                 "refused at start-up")
      ->group(group);
  app.add_option("--tls-cert", files.tls_cert,
                 "PEM certificate (chain) of the public API: serve it over TLS (with --tls-key); plain clients then "
                 "fail with UNAVAILABLE. The control plane stays plain TCP")
      ->group(group);
  app.add_option("--tls-key", files.tls_key, "PEM private key of --tls-cert")->group(group);
}

inline absl::Status apply_public_api_flags(const PublicApiFiles& files, CoordinatorOptions& options) {
  absl::StatusOr<PublicApiSecurity> security =
      load_public_api_security(files.auth_token_file, files.tls_cert, files.tls_key);
  if (!security.ok()) return security.status();
  options.security = *std::move(security);
  return absl::OkStatus();
}

}  // namespace exl3
