// Launcher: one exl3-launch run. Plans the shards, spawns the workers, starts the coordinator,
// supervises: a worker that dies fails in-flight requests (UNAVAILABLE), the group is torn down
// in order and the launcher exits non-zero, or with --restart serves again. SIGINT/SIGTERM drain
// then stop everything; a second signal stops at once. No process is left behind.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "coordinator/server/coordinator.h"

namespace exl3 {

struct LaunchOptions {
  CoordinatorOptions coordinator;  // world_size = number of workers
  std::vector<double> split_gib;   // per-worker caps; empty = available RAM shared equally
  std::string worker_bin;          // path of exl3-worker
  bool plan_only = false;
  bool restart = false;
  int max_restarts = 3;
  std::chrono::milliseconds drain_timeout{30000};
};

// Returns the process exit code.
int run_launcher(const LaunchOptions& options);

}  // namespace exl3
