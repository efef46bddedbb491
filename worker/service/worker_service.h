// The worker process's life: dial the coordinator, register, open the command session, load the
// planned shard (joining the collective group through the coordinator's rendezvous store), run
// steps until told to shut down. Any broken link (coordinator gone, peer gone, deadline) ends the
// worker with an error so the launcher can tear the group down. A CPU worker computes on the CPU
// backend and joins a Gloo group; a CUDA worker on the CUDA backend of its device and joins an
// NCCL group (wrapped in the one-shot P2P all-reduce when LoadShard.all_reduce says oneshot): the
// LoadShard's comm backend must match ("gloo" or "nccl"), never a fallback, and a CPU worker of a
// group refuses oneshot.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "kernels/int8_activations.h"

namespace exl3 {

struct WorkerOptions {
  std::string coordinator;      // HOST:PORT of the control plane
  int rank = 0;
  int world_size = 1;
  std::string backend = "cpu";  // "cpu" (reference kernels + Gloo) or "cuda" (CUDA kernels + NCCL)
  int device = 0;               // CUDA ordinal in this process (exl3-launch sets CUDA_VISIBLE_DEVICES, so 0)
  std::string cuda_visible_devices = "<unset>";  // the environment's, for messages (read in main)
  int64_t memory_bytes = 0;     // CPU: memory this worker may use (reported at registration)
  std::chrono::milliseconds connect_timeout{60000};
  bool step_graphs = true;      // decode steps replay CUDA graphs (EngineOptions::step_graphs)
  // This worker's copy of the model (another host has its own path); empty: the coordinator's path.
  std::string model_dir;
  // Where the CPU collectives (Gloo) bind: "auto" (the interface that routes to the coordinator),
  // "coordinator" (the address the coordinator sends), or an address of this host.
  std::string comm_host = "auto";
  // Secret sent with every control-plane call (--cluster-secret-file); empty = none.
  std::string cluster_secret;
  // --int8-activations: the mode this worker expects. The coordinator's LoadShard carries the job's
  // mode; a worker given one that differs refuses the shard. Unset: whatever the coordinator says
  // (off when it says nothing).
  std::optional<Int8Activations> int8_activations;
};

// Registers with the coordinator and runs its commands until it shuts the session down. Every error
// returned names the rank ("rank R: ...").
absl::Status run_worker(const WorkerOptions& options);

}  // namespace exl3
