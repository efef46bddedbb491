// The OpenAI-compatible gateway (gateway/exl3-gateway, a Python service) as one more child of
// exl3-launch: started once the coordinator serves, against its public gRPC API, and stopped with
// the rest. It runs under the launcher's no-orphan rules (process_group.h) with its output
// prefixed "[openai] ". Start-up waits until the gateway listens: it writes HOST:PORT to a ready
// file in a private temporary folder; a gateway that exits first, or is not up within the ready
// timeout, is an error naming what happened (its own message is in its prefixed output).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "launch/process/process_group.h"

namespace exl3 {

struct OpenAiGatewayOptions {
  int port = -1;  // -1: no gateway; 0: any free port (the bound address is printed)
  std::string host = "127.0.0.1";
  std::string python;  // interpreter with the gateway's packages (scripts/setup: build/gateway-venv/bin/python)
  std::string script;  // gateway/exl3-gateway
  std::string api_key_file;
  std::string chat_template;
  std::string model_name;
  // How the gateway reaches the coordinator when its API needs them (--auth-token-file, TLS).
  std::string grpc_auth_token_file;
  std::string grpc_tls_ca;
  std::chrono::milliseconds ready_timeout{60000};

  bool enabled() const { return port >= 0; }
};

// The first of `exe_dir` and its ancestors that holds gateway/exl3-gateway (a checkout whose
// build/<dir>/bin holds exl3-launch), or nullopt.
std::optional<std::string> find_gateway_root(const std::string& exe_dir);

// The address a local client uses for a server listening on host:port ("0.0.0.0" -> 127.0.0.1,
// "::" -> [::1], other IPv6 addresses bracketed).
std::string local_target(const std::string& host, int port);

class OpenAiGateway {
 public:
  // Spawns the gateway for the coordinator at `grpc_target` serving `model_dir` and waits until it
  // listens. Cancelled when `wake_fd` becomes readable first (a stop signal: the gateway is
  // stopped and the caller handles the signal).
  static absl::StatusOr<std::unique_ptr<OpenAiGateway>> start(const OpenAiGatewayOptions& options,
                                                              const std::string& grpc_target,
                                                              const std::string& model_dir, int wake_fd);
  ~OpenAiGateway();
  OpenAiGateway(const OpenAiGateway&) = delete;
  OpenAiGateway& operator=(const OpenAiGateway&) = delete;

  // "HOST:PORT" it listens on.
  const std::string& address() const { return address_; }
  pid_t pid() const { return group_->pid(0); }
  // How it ended once it has exited (reaped), nullopt while it runs.
  absl::StatusOr<std::optional<ChildExit>> poll();
  // SIGTERM, up to `grace`, then SIGKILL; a non-zero exit is reported on stderr.
  void stop(std::chrono::milliseconds grace);

 private:
  OpenAiGateway() = default;

  std::unique_ptr<ProcessGroup> group_;
  std::string temp_dir_;
  std::string address_;
  bool exited_ = false;
};

}  // namespace exl3
