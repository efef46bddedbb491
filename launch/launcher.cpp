// exl3-launch's supervision loop.
#include "launch/launcher.h"

#include <cstdio>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/byte_units.h"
#include "launch/gpu_probe.h"
#include "launch/process/process_group.h"
#include "launch/process/signal_watcher.h"
#include "worker/comm/cluster_secret.h"
#include "worker/service/process_memory.h"

namespace exl3 {
namespace {

enum class Outcome { kStopped, kFailed };

std::vector<uint64_t> caps_for(const LaunchOptions& o) {
  std::vector<uint64_t> caps;
  if (!o.split_gib.empty()) {
    for (double g : o.split_gib) caps.push_back(gib_to_bytes(g));
  } else if (!o.gpus.empty()) {
    return caps;  // the coordinator takes each GPU's free memory from its worker's registration
  } else {
    const uint64_t ram = static_cast<uint64_t>(available_ram_bytes());
    for (int r = 0; r < o.coordinator.world_size; ++r) caps.push_back(ram / o.coordinator.world_size);
  }
  return caps;
}

// One serving run: coordinator + workers until a stop signal (kStopped) or a failure (kFailed).
// The workers read the run's cluster secret from `secret_file` (o.coordinator.cluster_secret).
Outcome serve_once(const LaunchOptions& o, SignalWatcher& signals, const std::string& secret_file) {
  CoordinatorOptions copts = o.coordinator;
  copts.caps = caps_for(o);
  Coordinator coordinator(copts);
  if (absl::Status s = coordinator.start_control(); !s.ok()) {
    std::fprintf(stderr, "exl3-launch: %s\n", std::string(s.message()).c_str());
    return Outcome::kFailed;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned threads = std::max(1u, cores / static_cast<unsigned>(copts.world_size));
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < copts.world_size; ++r) {
    ProcessSpec spec;
    spec.argv = {o.worker_bin, "--coordinator", absl::StrCat(copts.control_host, ":", coordinator.control_port()),
                 "--rank", std::to_string(r), "--world", std::to_string(copts.world_size),
                 "--step-graphs", o.step_graphs ? "on" : "off"};
    if (!secret_file.empty()) spec.argv.insert(spec.argv.end(), {"--cluster-secret-file", secret_file});
    // Workers share the cores: one BLAS thread pool each, sized so they do not oversubscribe.
    spec.env = {{"OPENBLAS_NUM_THREADS", std::to_string(threads)}, {"OMP_NUM_THREADS", std::to_string(threads)}};
    if (o.gpus.empty()) {
      spec.argv.insert(spec.argv.end(), {"--backend", "cpu", "--memory-gib", absl::StrCat(copts.caps[r] / 1073741824.0)});
    } else {
      // One GPU per worker: it sees only its own, as device 0.
      spec.argv.insert(spec.argv.end(), {"--backend", "cuda", "--device", "0"});
      spec.env.emplace_back("CUDA_VISIBLE_DEVICES", child_visible_devices(o.gpus[r], o.visible_devices));
      spec.label = absl::StrCat("worker ", r, " gpu ", o.gpus[r]);
    }
    specs.push_back(std::move(spec));
  }
  auto group = ProcessGroup::spawn(std::move(specs));
  if (!group.ok()) {
    std::fprintf(stderr, "exl3-launch: %s\n", std::string(group.status().message()).c_str());
    return Outcome::kFailed;
  }
  std::fprintf(stderr, "exl3-launch: started %d worker(s) (pids", copts.world_size);
  for (pid_t p : (*group)->pids()) std::fprintf(stderr, " %d", p);
  std::fprintf(stderr, ")\n");

  std::future<absl::Status> startup = std::async(std::launch::async, [&] { return coordinator.start_serving(); });
  bool serving = false;
  std::unique_ptr<OpenAiGateway> gateway;
  Outcome outcome = Outcome::kFailed;
  while (true) {
    auto exited = (*group)->wait_any(ProcessClock::now() + std::chrono::milliseconds(100), signals.fd());
    if (!exited.ok()) {
      std::fprintf(stderr, "exl3-launch: waiting for workers failed: %s\n", std::string(exited.status().message()).c_str());
      break;
    }
    if (exited->has_value()) {
      std::fprintf(stderr, "exl3-launch: %s; stopping the group\n", (*exited)->describe().c_str());
      break;
    }
    if (std::optional<int> sig = signals.take()) {
      std::fprintf(stderr, "exl3-launch: signal %d: draining requests (a second signal stops at once)\n", *sig);
      outcome = Outcome::kStopped;
      auto drain = std::async(std::launch::async, [&] {
        if (startup.valid()) startup.wait();
        coordinator.shutdown(o.drain_timeout);
      });
      while (drain.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        if (signals.take()) {
          std::fprintf(stderr, "exl3-launch: second signal: stopping now\n");
          break;
        }
      }
      break;
    }
    if (!serving && startup.valid() && startup.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      const absl::Status s = startup.get();
      if (!s.ok()) {
        std::fprintf(stderr, "exl3-launch: %s\n", std::string(s.message()).c_str());
        break;
      }
      serving = true;
      std::printf("serving on %s:%d\n", copts.host.c_str(), coordinator.public_port());
      std::fflush(stdout);
      if (o.openai.enabled()) {
        auto started = OpenAiGateway::start(o.openai, local_target(copts.host, coordinator.public_port()),
                                            copts.model_dir, signals.fd());
        if (absl::IsCancelled(started.status())) continue;  // the signal is handled on the next turn
        if (!started.ok()) {
          std::fprintf(stderr, "exl3-launch: %s\n", std::string(started.status().message()).c_str());
          break;
        }
        gateway = std::move(*started);
        std::printf("openai api on http://%s\n", gateway->address().c_str());
        std::fflush(stdout);
      }
    }
    if (serving) {
      const absl::Status f = coordinator.failure();
      if (!f.ok()) {
        std::fprintf(stderr, "exl3-launch: worker group failed: %s\n", std::string(f.message()).c_str());
        break;
      }
    }
    if (gateway != nullptr) {
      auto exited = gateway->poll();
      if (!exited.ok() || exited->has_value()) {
        std::fprintf(stderr, "exl3-launch: the OpenAI gateway %s; stopping the group\n",
                     exited.ok() ? (*exited)->describe().c_str() : std::string(exited.status().message()).c_str());
        break;
      }
    }
  }
  auto report = [](const absl::StatusOr<std::vector<ChildExit>>& exits) {
    if (!exits.ok()) {
      std::fprintf(stderr, "exl3-launch: stopping workers: %s\n", std::string(exits.status().message()).c_str());
      return;
    }
    for (const ChildExit& e : *exits) {
      if (!e.success()) std::fprintf(stderr, "exl3-launch: %s\n", e.describe().c_str());
    }
  };
  if (outcome == Outcome::kFailed) {
    coordinator.request_stop();
    auto stop = std::async(std::launch::async, [&] { coordinator.shutdown(std::chrono::milliseconds(0)); });
    report((*group)->terminate_all(std::chrono::milliseconds(2000)));
    if (startup.valid()) startup.wait();
    stop.wait();
  } else {
    // Workers told to shut down exit on their own; only stragglers get signals.
    const auto deadline = ProcessClock::now() + std::chrono::seconds(5);
    while ((*group)->pending_count() > 0 && ProcessClock::now() < deadline) {
      auto exited = (*group)->wait_any(deadline);
      if (!exited.ok()) break;
      if (exited->has_value() && !(*exited)->success()) {
        std::fprintf(stderr, "exl3-launch: %s\n", (*exited)->describe().c_str());
      }
    }
    report((*group)->terminate_all(std::chrono::milliseconds(5000)));
  }
  // Last, so that the gateway relays the coordinator's final errors or completions to its clients
  // (uvicorn lets open responses finish for up to 3 s after SIGTERM).
  if (gateway != nullptr) gateway->stop(std::chrono::milliseconds(5000));
  return outcome;
}

}  // namespace

int run_launcher(const LaunchOptions& o) {
  if (o.plan_only) {
    Coordinator coordinator(o.coordinator);
    absl::Status s = coordinator.start_control();
    if (!s.ok()) {
      std::fprintf(stderr, "exl3-launch: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    absl::StatusOr<std::string> table = coordinator.plan_table(caps_for(o));
    coordinator.shutdown(std::chrono::milliseconds(0));
    if (!table.ok()) {
      std::fprintf(stderr, "exl3-launch: %s%s\n",
                   absl::IsResourceExhausted(table.status()) ? "the model does not fit: " : "",
                   std::string(table.status().message()).c_str());
      return 1;
    }
    std::printf("%s", table->c_str());
    return 0;
  }
  auto signals = SignalWatcher::create();
  if (!signals.ok()) {
    std::fprintf(stderr, "exl3-launch: %s\n", std::string(signals.status().message()).c_str());
    return 1;
  }
  // A fresh secret for this run: only processes given its file (mode 0600 in a private directory,
  // removed when the launcher returns) can join the control plane. Never on argv or in a log.
  absl::StatusOr<std::string> secret = make_cluster_secret();
  absl::StatusOr<std::unique_ptr<ClusterSecretFile>> secret_file =
      secret.ok() ? ClusterSecretFile::create(*secret, o.temp_dir) : secret.status();
  if (!secret_file.ok()) {
    std::fprintf(stderr, "exl3-launch: cluster secret: %s\n", std::string(secret_file.status().message()).c_str());
    return 1;
  }
  LaunchOptions run = o;
  run.coordinator.cluster_secret = *secret;
  for (int attempt = 0;; ++attempt) {
    const Outcome outcome = serve_once(run, **signals, (*secret_file)->path());
    if (outcome == Outcome::kStopped) {
      std::fprintf(stderr, "exl3-launch: stopped\n");
      return 0;
    }
    if (!o.restart || attempt >= o.max_restarts) return 1;
    std::fprintf(stderr, "exl3-launch: restarting the group (%d of %d)\n", attempt + 1, o.max_restarts);
  }
}

}  // namespace exl3
