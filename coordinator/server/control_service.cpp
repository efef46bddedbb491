// Control service RPC handlers.
#include "coordinator/server/control_service.h"

#include "worker/comm/cluster_secret.h"
#include "worker/comm/grpc_store.h"

namespace exl3 {

void ControlService::set_group(std::shared_ptr<WorkerGroup> group) {
  std::lock_guard lock(mu_);
  group_ = std::move(group);
}

std::shared_ptr<WorkerGroup> ControlService::group() const {
  std::lock_guard lock(mu_);
  return group_;
}

grpc::Status ControlService::Register(grpc::ServerContext* context, const pb::RegisterRequest* request,
                                      pb::RegisterResponse* response) {
  if (grpc::Status s = check_cluster_secret(*context, cluster_secret_); !s.ok()) return s;
  auto g = group();
  if (!g) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is not accepting workers");
  return g->on_register(*request, response);
}

grpc::Status ControlService::Session(grpc::ServerContext* context,
                                     grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>* stream) {
  if (grpc::Status s = check_cluster_secret(*context, cluster_secret_); !s.ok()) return s;
  auto g = group();
  if (!g) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is not accepting workers");
  return g->run_session(context, stream);
}

grpc::Status ControlService::StoreSet(grpc::ServerContext* context, const pb::StoreSetRequest* request,
                                      pb::StoreSetResponse*) {
  if (grpc::Status s = check_cluster_secret(*context, cluster_secret_); !s.ok()) return s;
  return handle_store_set(store_, *request);
}

grpc::Status ControlService::StoreGet(grpc::ServerContext* context, const pb::StoreGetRequest* request,
                                      pb::StoreGetResponse* response) {
  if (grpc::Status s = check_cluster_secret(*context, cluster_secret_); !s.ok()) return s;
  return handle_store_get(store_, *request, response);
}

}  // namespace exl3
