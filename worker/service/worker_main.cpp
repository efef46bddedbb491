// exl3-worker: one rank of the runtime. Normally spawned by exl3-launch; can be run by hand
// (another host, Slurm, Kubernetes) against exl3-coordinator.
#include <csignal>
#include <cstdio>

#include "CLI/CLI.hpp"
#include "worker/service/worker_service.h"

int main(int argc, char** argv) {
  exl3::WorkerOptions o;
  double memory_gib = 0.0;
  double connect_timeout_s = 60.0;
  CLI::App app{"exl3-worker: one rank of the EXL3 runtime; dials the coordinator, loads its shard, runs steps"};
  app.add_option("--coordinator", o.coordinator, "Control-plane address of the coordinator, HOST:PORT")->required();
  app.add_option("--rank", o.rank, "This worker's rank, 0 <= rank < world")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--world", o.world_size, "Number of workers in the group")->required()->check(CLI::PositiveNumber);
  app.add_option("--backend", o.backend, "Compute backend: cpu (reference kernels, Gloo collectives)")
      ->check(CLI::IsMember({"cpu"}));
  app.add_option("--memory-gib", memory_gib, "Memory this worker may use in GiB (default: the host's available RAM)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--connect-timeout", connect_timeout_s, "Seconds to wait for the coordinator at start-up")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= o.world_size) {
    std::fprintf(stderr, "exl3-worker: --rank %d must be below --world %d\n", o.rank, o.world_size);
    return 2;
  }
  o.memory_bytes = static_cast<int64_t>(memory_gib * 1073741824.0);
  o.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000));
  // A peer that vanishes must surface as an error from the communicator, not kill this process.
  std::signal(SIGPIPE, SIG_IGN);
  const absl::Status status = exl3::run_worker(o);
  if (!status.ok()) {
    std::fprintf(stderr, "exl3-worker: rank %d: %s\n", o.rank, std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
