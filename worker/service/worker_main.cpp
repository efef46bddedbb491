// exl3-worker: one rank of the runtime. Normally spawned by exl3-launch; can be run by hand
// (another host, Slurm, Kubernetes) against exl3-coordinator.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "CLI/CLI.hpp"
#include "worker/comm/cluster_secret.h"
#include "worker/service/worker_device.h"
#include "worker/service/worker_service.h"

int main(int argc, char** argv) {
  // Before any CUDA or NCCL call: NVLink multicast stays off unless the user set it (NCCL reads it
  // once per process; the shared H200 machines must keep it off).
  const std::string nvls = exl3::default_nccl_nvls_off();
  exl3::WorkerOptions o;
  double memory_gib = 0.0;
  double connect_timeout_s = 60.0;
  std::string step_graphs = "on";
  std::string int8_activations;
  CLI::App app{"exl3-worker: one rank of the EXL3 runtime; dials the coordinator, loads its shard, runs steps"};
  app.add_option("--coordinator", o.coordinator, "Control-plane address of the coordinator, HOST:PORT")->required();
  app.add_option("--rank", o.rank, "This worker's rank, 0 <= rank < world")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--world", o.world_size, "Number of workers in the group")->required()->check(CLI::Range(1, 1024));
  app.add_option("--backend", o.backend,
                 "Compute backend: cpu (reference kernels + BLAS, Gloo collectives) or cuda (our CUDA kernels on one "
                 "GPU, NCCL collectives)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--device", o.device, "CUDA device ordinal as this process sees it (exl3-launch sets "
                                       "CUDA_VISIBLE_DEVICES to the worker's GPU, so 0)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--memory-gib", memory_gib,
                 "CPU workers: memory this worker may use in GiB (default: the host's available RAM); a CUDA "
                 "worker reports its GPU's memory and gets its cap with the shard")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--connect-timeout", connect_timeout_s, "Seconds to wait for the coordinator at start-up")
      ->check(CLI::Range(1e-3, 1e7));
  app.add_option("--step-graphs", step_graphs,
                 "on: decode steps replay one CUDA graph per batch size and page bucket (CUDA backend); off: "
                 "launch every op")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  app.add_option("--int8-activations", int8_activations,
                 exl3::int8_activations_flag_help() +
                     ". The coordinator sends the job's mode (its default: auto); given here, it must be the same or "
                     "the worker refuses the shard. Default: the coordinator's");
  app.add_option("--model", o.model_dir,
                 "This worker's copy of the model directory (a worker on another host names its own path; "
                 "default: the path the coordinator sends)");
  app.add_option("--comm-host", o.comm_host,
                 "Address the CPU collectives (Gloo) bind to and advertise: auto (the interface that routes to the "
                 "coordinator), coordinator (the address the coordinator sends) or an address of this host")
      ->capture_default_str();
  std::string cluster_secret_file;
  app.add_option("--cluster-secret-file", cluster_secret_file,
                 "File holding the run's control-plane secret (the file given to exl3-coordinator; exl3-launch passes "
                 "its own)");
  CLI11_PARSE(app, argc, argv);
  if (o.rank >= o.world_size) {
    std::fprintf(stderr, "exl3-worker: --rank %d must be below --world %d\n", o.rank, o.world_size);
    return 2;
  }
  if (!cluster_secret_file.empty()) {
    absl::StatusOr<std::string> secret = exl3::read_cluster_secret_file(cluster_secret_file);
    if (!secret.ok()) {
      std::fprintf(stderr, "exl3-worker: rank %d: %s\n", o.rank, std::string(secret.status().message()).c_str());
      return 2;
    }
    o.cluster_secret = *std::move(secret);
  }
  if (o.backend == "cuda" && !exl3::worker_has_cuda()) {
    std::fprintf(stderr, "exl3-worker: rank %d: --backend cuda: %s\n", o.rank, exl3::kNoCudaMessage);
    return 2;
  }
  o.memory_bytes = static_cast<int64_t>(memory_gib * 1073741824.0);
  o.step_graphs = step_graphs == "on";
  if (!int8_activations.empty()) {
    const absl::StatusOr<exl3::Int8Activations> int8 =
        exl3::parse_int8_activations(int8_activations, "--int8-activations");
    if (!int8.ok()) {
      std::fprintf(stderr, "exl3-worker: rank %d: %s\n", o.rank, std::string(int8.status().message()).c_str());
      return 2;
    }
    o.int8_activations = *int8;
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) o.cuda_visible_devices = visible;
  std::fprintf(stderr, "exl3-worker rank %d/%d: backend %s%s, coordinator %s, NCCL_NVLS_ENABLE=%s%s\n", o.rank,
               o.world_size, o.backend.c_str(),
               o.backend == "cuda" ? (" device " + std::to_string(o.device)).c_str() : "", o.coordinator.c_str(),
               nvls.c_str(),
               o.backend == "cuda"
                   ? (", CUDA_VISIBLE_DEVICES=" + o.cuda_visible_devices).c_str()
                   : "");
  o.connect_timeout = std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000));
  // A peer that vanishes must surface as an error from the communicator, not kill this process.
  std::signal(SIGPIPE, SIG_IGN);
  const absl::Status status = exl3::run_worker(o);
  if (!status.ok()) {
    // run_worker's errors name the rank.
    std::fprintf(stderr, "exl3-worker: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
