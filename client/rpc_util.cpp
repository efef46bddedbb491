// Channel, deadline, JSON and error reporting shared by exl3-client's commands.
#include "client/rpc_util.h"

#include <chrono>
#include <cstdio>

#include "client/format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace exl3::client {

std::shared_ptr<grpc::Channel> make_channel(const ClientConfig& config) {
  return grpc::CreateChannel(config.server, grpc::InsecureChannelCredentials());
}

void set_deadline(grpc::ClientContext& context, const ClientConfig& config) {
  const auto timeout =
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(config.timeout_s));
  context.set_deadline(std::chrono::system_clock::now() + timeout);
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
