// exl3-coordinator: the coordinator alone, for workers started by hand on any host
// (exl3-worker --coordinator HOST:CONTROL_PORT --rank R --world N).
#include <csignal>
#include <cstdio>
#include <thread>

#include "CLI/CLI.hpp"
#include "coordinator/planner/byte_units.h"
#include "coordinator/server/coordinator.h"
#include "coordinator/server/malloc_arenas.h"
#include "coordinator/server/public_api_flags.h"
#include "coordinator/server/serving_flags.h"
#include "worker/comm/cluster_secret.h"

namespace {

std::atomic<bool> g_stop_signal{false};  // set by the signal handler, read by main's loop
void on_signal(int) { g_stop_signal = true; }

}  // namespace

int main(int argc, char** argv) {
  exl3::limit_malloc_arenas();
  exl3::CoordinatorOptions o;
  std::string mode = "tp", split, backend = "cpu";
  CLI::App app{"exl3-coordinator: serves the gRPC generate API and drives workers that dial in"};
  app.add_option("--model", o.model_dir, "Model directory (config.json, *.safetensors, tokenizer.json)")->required();
  app.add_option("--world", o.world_size, "Number of workers that will register")
      ->required()
      ->check(CLI::Range(1, 1024));
  app.add_option("--host", o.host, "Address of the public API (127.0.0.1: this machine only; 0.0.0.0: every interface)")
      ->capture_default_str();
  app.add_option("--port", o.port, "Port of the public API (0 = any free port; a port in use is an error, never shared)")->capture_default_str();
  app.add_option("--control-host", o.control_host, "Address workers dial (and their collectives bind to)")
      ->capture_default_str();
  app.add_option("--control-port", o.control_port, "Port of the control plane (a port in use is an error)")->capture_default_str();
  app.add_option("--mode", mode, "Sharding: tp (tensor parallel) or layers (contiguous layer ranges)")
      ->check(CLI::IsMember({"tp", "layers"}))->capture_default_str();
  app.add_option("--backend", backend,
                 "What the workers compute on: cpu (Gloo collectives) or cuda (one GPU each, NCCL collectives); every "
                 "worker must be started with the same --backend")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--split", split, "Per-worker memory caps in GiB, comma separated (default: each worker's free memory)");
  exl3::ServingFlagText serving;
  exl3::add_serving_flags(app, o, serving);
  std::string cluster_secret_file;
  app.add_option("--cluster-secret-file", cluster_secret_file,
                 "File holding the secret every worker must present on the control plane (give the same file to every "
                 "exl3-worker); without it any process that reaches the control port can join as a rank");
  exl3::PublicApiFiles api_files;
  exl3::add_public_api_flags(app, o, api_files);
  CLI11_PARSE(app, argc, argv);
  if (const absl::Status s = exl3::apply_public_api_flags(api_files, o); !s.ok()) {
    std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!cluster_secret_file.empty()) {
    absl::StatusOr<std::string> secret = exl3::read_cluster_secret_file(cluster_secret_file);
    if (!secret.ok()) {
      std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(secret.status().message()).c_str());
      return 2;
    }
    o.cluster_secret = *std::move(secret);
  } else if (!exl3::is_loopback_host(o.control_host)) {
    std::fprintf(stderr,
                 "exl3-coordinator: warning: the control plane listens on %s without --cluster-secret-file: any "
                 "process that reaches the control port can join as a worker\n",
                 o.control_host.c_str());
  }
  o.mode = *exl3::parse_plan_mode(mode);
  if (const absl::Status st = exl3::apply_serving_flags(serving, o); !st.ok()) {
    std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  o.backend = *exl3::parse_backend(backend);
  if (!split.empty()) {
    const auto gibs = exl3::parse_gib_list(split);
    if (!gibs.ok()) {
      std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(gibs.status().message()).c_str());
      return 2;
    }
    for (double gib : *gibs) o.caps.push_back(exl3::gib_to_bytes(gib));
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  exl3::Coordinator coordinator(o);
  absl::Status s = coordinator.start_control();
  if (s.ok()) {
    std::fprintf(stderr, "exl3-coordinator: control plane on %s:%d; start %d worker(s) with\n"
                         "  exl3-worker --coordinator %s:%d --rank R --world %d --backend %s%s\n",
                 o.control_host.c_str(), coordinator.control_port(), o.world_size, o.control_host.c_str(),
                 coordinator.control_port(), o.world_size, backend.c_str(),
                 cluster_secret_file.empty() ? "" : (" --cluster-secret-file " + cluster_secret_file).c_str());
    s = coordinator.start_serving();
  }
  if (!s.ok()) {
    std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(s.message()).c_str());
    coordinator.shutdown(std::chrono::milliseconds(0));
    return 1;
  }
  std::printf("serving on %s:%d\n", o.host.c_str(), coordinator.public_port());
  std::fflush(stdout);
  std::thread watcher([&] {
    while (!g_stop_signal) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    coordinator.request_stop();
  });
  watcher.detach();
  const absl::Status result = coordinator.wait();
  coordinator.shutdown(std::chrono::milliseconds(30000));
  if (!result.ok()) {
    std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(result.message()).c_str());
    return 1;
  }
  return 0;
}
