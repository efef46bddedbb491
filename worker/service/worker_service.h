// The worker process's life: dial the coordinator, register, open the command session, load the
// planned shard (joining the collective group through the coordinator's rendezvous store), run
// steps until told to shut down. Any broken link (coordinator gone, peer gone, deadline) ends the
// worker with an error so the launcher can tear the group down.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace exl3 {

struct WorkerOptions {
  std::string coordinator;      // HOST:PORT of the control plane
  int rank = 0;
  int world_size = 1;
  std::string backend = "cpu";  // "cpu" (reference kernels + Gloo)
  int64_t memory_bytes = 0;     // memory this worker may use (reported at registration)
  std::chrono::milliseconds connect_timeout{60000};
};

absl::Status run_worker(const WorkerOptions& options);

}  // namespace exl3
