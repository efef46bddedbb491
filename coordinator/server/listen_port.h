// The ports the coordinator's servers listen on (public API, control plane). A port that another
// process holds is an error at start-up naming HOST:PORT and the flag, found before anything loads;
// and no server of ours shares its port: gRPC sets SO_REUSEPORT by default, which would let a
// second server listen beside the first and split clients between the two.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"

namespace exl3 {

// Binds (and closes again) a TCP socket on every address `host` resolves to, as gRPC would
// (SO_REUSEADDR, no SO_REUSEPORT). UNAVAILABLE naming "HOST:PORT (what)" when the port is in
// use; OK for port 0 (any free port) and for addresses the probe cannot judge (gRPC reports those).
absl::Status check_port_free(const std::string& host, int port, const std::string& what);

// Turns gRPC's SO_REUSEPORT off for every port of `builder`.
void disable_port_sharing(grpc::ServerBuilder& builder);

}  // namespace exl3
