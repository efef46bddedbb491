// Control service (worker.proto): forwards registration and sessions to the current worker
// group, and serves the rendezvous store the collectives bootstrap from. With a cluster secret set,
// every one of its RPCs is refused (UNAUTHENTICATED) unless the call carries that secret; a refused
// Register takes no rank.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "coordinator/server/worker_group.h"
#include "proto/worker.grpc.pb.h"
#include "worker/comm/in_memory_store.h"

namespace exl3 {

class ControlService final : public pb::Control::Service {
 public:
  // The group that registrations and sessions go to (replaced on restart).
  void set_group(std::shared_ptr<WorkerGroup> group);
  // The secret every call must carry (cluster_secret.h); empty = any caller (single host). Set
  // before the server starts.
  void set_cluster_secret(std::string secret) { cluster_secret_ = std::move(secret); }
  // Wakes store waiters so the server can stop without waiting out their timeouts.
  void close_store() { store_.close(); }

  grpc::Status Register(grpc::ServerContext* context, const pb::RegisterRequest* request,
                        pb::RegisterResponse* response) override;
  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<pb::Command, pb::WorkerMessage>* stream) override;
  grpc::Status StoreSet(grpc::ServerContext* context, const pb::StoreSetRequest* request,
                        pb::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* context, const pb::StoreGetRequest* request,
                        pb::StoreGetResponse* response) override;

 private:
  std::shared_ptr<WorkerGroup> group() const;

  mutable std::mutex mu_;
  std::shared_ptr<WorkerGroup> group_;
  InMemoryStore store_;
  std::string cluster_secret_;
};

}  // namespace exl3
