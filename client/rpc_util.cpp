// Channel, deadline, JSON and error reporting shared by exl3-client's commands.
#include "client/rpc_util.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "client/format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace exl3::client {

std::shared_ptr<grpc::Channel> make_channel(const ClientConfig& config) {
  if (!config.tls) return grpc::CreateChannel(config.server, grpc::InsecureChannelCredentials());
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = config.tls_ca_pem;
  return grpc::CreateChannel(config.server, grpc::SslCredentials(options));
}

void set_deadline(grpc::ClientContext& context, const ClientConfig& config) {
  const auto timeout =
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(config.timeout_s));
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  if (!config.auth_token.empty()) context.AddMetadata("authorization", "Bearer " + config.auth_token);
}

absl::Status load_client_security(const std::string& auth_token_file, const std::string& tls_ca_file,
                                  ClientConfig& config) {
  auto read = [](const std::string& flag, const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    if (in) text << in.rdbuf();
    if (!in || in.bad()) return absl::InvalidArgumentError(flag + " " + path + ": cannot read the file");
    *out = text.str();
    return absl::OkStatus();
  };
  if (!auth_token_file.empty()) {
    std::string token;
    if (absl::Status s = read("--auth-token-file", auth_token_file, &token); !s.ok()) return s;
    config.auth_token = std::string(absl::StripAsciiWhitespace(token));
    if (config.auth_token.empty()) {
      return absl::InvalidArgumentError("--auth-token-file " + auth_token_file + ": the file holds no token");
    }
  }
  if (!tls_ca_file.empty()) {
    if (absl::Status s = read("--tls-ca", tls_ca_file, &config.tls_ca_pem); !s.ok()) return s;
    config.tls = true;
  }
  return absl::OkStatus();
}

std::string to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) {
    return "{\"error\": \"response not printable as JSON\"}";
  }
  return out;
}

int report_rpc_error(const std::string& what, const grpc::Status& status) {
  std::fprintf(stderr, "error: %s: %s: %s\n", what.c_str(), status_code_name(status.error_code()).c_str(),
               status.error_message().c_str());
  return kExitRpcError;
}

}  // namespace exl3::client
