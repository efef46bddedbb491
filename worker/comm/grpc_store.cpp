// GrpcStoreClient (StoreSet/StoreGet calls with client deadlines) and the server-side handlers
// that serve an InMemoryStore through the Control service.
#include "worker/comm/grpc_store.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/check.h"

namespace exl3 {

namespace {

absl::Status to_absl(const grpc::Status& status, const std::string& what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

grpc::Status to_grpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

std::chrono::system_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

}  // namespace

GrpcStoreClient::GrpcStoreClient(std::shared_ptr<grpc::ChannelInterface> channel,
                                 std::chrono::milliseconds set_timeout)
    : stub_(control::v1::Control::NewStub(channel)), set_timeout_(set_timeout) {}

absl::Status GrpcStoreClient::set(const std::string& key, const std::vector<char>& value) {
  control::v1::StoreSetRequest request;
  request.set_key(key);
  request.set_value(std::string(value.begin(), value.end()));
  control::v1::StoreSetResponse response;
  grpc::ClientContext context;
  context.set_deadline(deadline_after(set_timeout_));
  return to_absl(stub_->StoreSet(&context, request, &response), absl::StrCat("StoreSet ", key));
}

absl::StatusOr<std::vector<std::vector<char>>> GrpcStoreClient::get(
    const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const std::string what = absl::StrCat("StoreGet [", absl::StrJoin(keys, ", "), "]");
  if (timeout <= std::chrono::milliseconds::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": timeout must be positive, got ", timeout.count(), " ms"));
  }
  const std::chrono::milliseconds wait =
      std::min(timeout, std::chrono::milliseconds(std::numeric_limits<int32_t>::max()));
  control::v1::StoreGetRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(static_cast<int32_t>(wait.count()));
  control::v1::StoreGetResponse response;
  grpc::ClientContext context;
  context.set_deadline(deadline_after(wait + kStoreGetDeadlineSlack));
  EXL3_RETURN_IF_ERROR(to_absl(stub_->StoreGet(&context, request, &response), what));
  if (static_cast<size_t>(response.values_size()) != keys.size()) {
    return absl::InternalError(absl::StrCat(what, ": server returned ", response.values_size(),
                                            " values for ", keys.size(), " keys"));
  }
  std::vector<std::vector<char>> values;
  values.reserve(keys.size());
  for (const std::string& value : response.values()) values.emplace_back(value.begin(), value.end());
  return values;
}

grpc::Status handle_store_set(InMemoryStore& store, const control::v1::StoreSetRequest& request) {
  if (request.key().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "StoreSet: empty key");
  }
  const std::string& value = request.value();
  return to_grpc(store.set(request.key(), std::vector<char>(value.begin(), value.end())));
}

grpc::Status handle_store_get(InMemoryStore& store, const control::v1::StoreGetRequest& request,
                              control::v1::StoreGetResponse* response) {
  if (request.keys().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "StoreGet: no keys");
  }
  if (request.timeout_ms() <= 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("StoreGet: timeout_ms must be positive, got ",
                                     request.timeout_ms()));
  }
  std::vector<std::string> keys;
  keys.reserve(request.keys_size());
  for (const std::string& key : request.keys()) {
    if (key.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "StoreGet: empty key");
    keys.push_back(key);
  }
  auto values = store.get(keys, std::chrono::milliseconds(request.timeout_ms()));
  if (!values.ok()) return to_grpc(values.status());
  for (const std::vector<char>& value : *values) response->add_values(value.data(), value.size());
  return grpc::Status::OK;
}

}  // namespace exl3
