// The rendezvous store over gRPC: the worker-side client of the coordinator's Control.StoreSet /
// StoreGet RPCs, and the server-side handlers the coordinator's Control service forwards them to.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/worker.grpc.pb.h"
#include "worker/comm/communicator.h"
#include "worker/comm/in_memory_store.h"

namespace exl3 {

// How far past the requested wait a StoreGet's client deadline lies, so that the server's own
// DEADLINE_EXCEEDED (which names the missing keys) normally arrives before the client gives up.
inline constexpr std::chrono::milliseconds kStoreGetDeadlineSlack{1000};
// Deadline of each StoreSet call unless the caller chooses another.
inline constexpr std::chrono::milliseconds kDefaultStoreSetTimeout{10000};

// RendezvousStore backed by a Control service. Thread-safe (gRPC stubs are). get() needs a
// positive timeout (INVALID_ARGUMENT otherwise) and is capped at INT32_MAX ms by the protocol.
// gRPC statuses map one to one onto absl codes; a coordinator that cannot be reached gives
// UNAVAILABLE or DEADLINE_EXCEEDED.
class GrpcStoreClient : public RendezvousStore {
 public:
  explicit GrpcStoreClient(std::shared_ptr<grpc::ChannelInterface> channel,
                           std::chrono::milliseconds set_timeout = kDefaultStoreSetTimeout);

  absl::Status set(const std::string& key, const std::vector<char>& value) override;
  absl::StatusOr<std::vector<std::vector<char>>> get(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) override;

 private:
  std::unique_ptr<control::v1::Control::Stub> stub_;
  const std::chrono::milliseconds set_timeout_;
};

// Server side, for the coordinator's Control service. handle_store_set: INVALID_ARGUMENT for an
// empty key. handle_store_get: INVALID_ARGUMENT for no keys, an empty key or timeout_ms <= 0;
// DEADLINE_EXCEEDED naming the missing keys when they are not all there by the deadline; the
// values in key order otherwise. The call blocks its server thread for up to timeout_ms.
grpc::Status handle_store_set(InMemoryStore& store, const control::v1::StoreSetRequest& request);
grpc::Status handle_store_get(InMemoryStore& store, const control::v1::StoreGetRequest& request,
                              control::v1::StoreGetResponse* response);

}  // namespace exl3
