// The address of this host's interface that routes toward a peer: where a worker's collectives
// should bind so that workers on other hosts can reach it (a worker on the coordinator's host
// gets the loopback address when the coordinator listens on it).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace exl3 {

// The local IP (v4 or v6, numeric) the kernel would use to send to `host` (a name or address) on
// `port`: a connected UDP socket's own address (no packet is sent). INVALID_ARGUMENT for a host
// that does not resolve, UNAVAILABLE when no route leads there.
absl::StatusOr<std::string> local_address_toward(const std::string& host, int port);

// Splits "HOST:PORT" (IPv6 as "[ADDR]:PORT"); INVALID_ARGUMENT naming the text when malformed.
absl::StatusOr<std::pair<std::string, int>> split_host_port(const std::string& address);

}  // namespace exl3
