// Launcher: one exl3-launch run. Plans the shards, spawns the workers, starts the coordinator,
// supervises: a worker that dies fails in-flight requests (UNAVAILABLE), the group is torn down
// in order and the launcher exits non-zero, or with --restart serves again. SIGINT/SIGTERM drain
// then stop everything; a second signal stops at once. No process is left behind. With
// openai.port >= 0 the OpenAI gateway (openai_gateway.h) starts once the coordinator serves and
// stops last; its exit stops the group.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/server/coordinator.h"
#include "launch/openai_gateway.h"

namespace exl3 {

struct LaunchOptions {
  CoordinatorOptions coordinator;  // world_size = number of workers; backend kCuda with gpus
  // GPU workers: one per entry, rank r on GPU gpus[r] (as this process numbers GPUs), each spawned
  // with CUDA_VISIBLE_DEVICES set to that GPU alone, --backend cuda, NCCL collectives. Empty: CPU
  // workers (Gloo).
  std::vector<int> gpus;
  // Per-worker caps; empty = available RAM shared equally (CPU workers) or each GPU's free memory
  // as its worker reports it (GPU workers).
  std::vector<double> split_gib;
  // The launcher's own CUDA_VISIBLE_DEVICES (nullopt when unset): GPU indices are entries of it.
  std::optional<std::string> visible_devices;
  // Where the run's cluster-secret file goes, in a private directory ($TMPDIR, else /tmp).
  std::string temp_dir = "/tmp";
  std::string worker_bin;          // path of exl3-worker
  bool step_graphs = true;         // passed to every worker as --step-graphs on|off
  bool plan_only = false;
  bool restart = false;
  int max_restarts = 3;
  std::chrono::milliseconds drain_timeout{30000};
  // The OpenAI-compatible gateway, started once the coordinator serves (off unless openai.port >= 0).
  OpenAiGatewayOptions openai;
};

// Returns the process exit code.
int run_launcher(const LaunchOptions& options);

}  // namespace exl3
