// What every exl3-client command does around its RPC: the channel, the per-call deadline, JSON
// printing of responses, and the error line "error: <what>: <CODE>: <message>".
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/commands.h"
#include "google/protobuf/message.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace exl3::client {

// A channel to config.server: TLS when config.tls, else plain TCP (the API's default, on localhost).
std::shared_ptr<grpc::Channel> make_channel(const ClientConfig& config);

// Sets the context's deadline to now + config.timeout_s, and the bearer token when there is one.
void set_deadline(grpc::ClientContext& context, const ClientConfig& config);

// Reads --auth-token-file (the token, surrounding whitespace removed) and --tls-ca (PEM roots,
// which imply TLS) into `config`; empty paths leave it as it is. Errors name the flag and path.
absl::Status load_client_security(const std::string& auth_token_file, const std::string& tls_ca_file,
                                  ClientConfig& config);

// The message as one line of JSON with the .proto field names.
std::string to_json(const google::protobuf::Message& message);

// Prints the error line to stderr and returns kExitRpcError.
int report_rpc_error(const std::string& what, const grpc::Status& status);

}  // namespace exl3::client
