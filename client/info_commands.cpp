// exl3-client tokenize, detokenize, info and stats: one unary call each.
#include <cstdio>

#include "client/commands.h"
#include "client/format.h"
#include "client/rpc_util.h"
#include "proto/inference.grpc.pb.h"

namespace exl3::client {
namespace {

std::unique_ptr<exl3::v1::Inference::Stub> new_stub(const ClientConfig& config) {
  return exl3::v1::Inference::NewStub(make_channel(config));
}

}  // namespace

int run_tokenize(const ClientConfig& config, const exl3::v1::TokenizeRequest& request, bool json) {
  grpc::ClientContext context;
  set_deadline(context, config);
  exl3::v1::TokenizeResponse response;
  const grpc::Status status = new_stub(config)->Tokenize(&context, request, &response);
  if (!status.ok()) return report_rpc_error("tokenize", status);
  const std::string out =
      json ? to_json(response)
           : format_token_ids(std::span<const int32_t>(response.ids().data(), response.ids().size()));
  std::printf("%s\n", out.c_str());
  return kExitOk;
}

int run_detokenize(const ClientConfig& config, const exl3::v1::DetokenizeRequest& request, bool json) {
  grpc::ClientContext context;
  set_deadline(context, config);
  exl3::v1::DetokenizeResponse response;
  const grpc::Status status = new_stub(config)->Detokenize(&context, request, &response);
  if (!status.ok()) return report_rpc_error("detokenize", status);
  if (json) {
    std::printf("%s\n", to_json(response).c_str());
  } else {
    // Exactly the text: no newline is added, so the output round-trips through tokenize.
    std::fwrite(response.text().data(), 1, response.text().size(), stdout);
  }
  return kExitOk;
}

int run_info(const ClientConfig& config, bool json) {
  grpc::ClientContext context;
  set_deadline(context, config);
  exl3::v1::ModelInfoResponse response;
  const grpc::Status status = new_stub(config)->ModelInfo(&context, exl3::v1::ModelInfoRequest(), &response);
  if (!status.ok()) return report_rpc_error("info", status);
  const std::string out = json ? to_json(response) + "\n" : format_model_info(response);
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}

int run_stats(const ClientConfig& config, bool json) {
  grpc::ClientContext context;
  set_deadline(context, config);
  exl3::v1::StatsResponse response;
  const grpc::Status status = new_stub(config)->Stats(&context, exl3::v1::StatsRequest(), &response);
  if (!status.ok()) return report_rpc_error("stats", status);
  const std::string out = json ? to_json(response) + "\n" : format_stats(response);
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}

}  // namespace exl3::client
