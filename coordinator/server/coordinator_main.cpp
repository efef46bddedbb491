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
#include "worker/comm/cluster_secret.h"

namespace {

std::atomic<bool> g_stop_signal{false};  // set by the signal handler, read by main's loop
void on_signal(int) { g_stop_signal = true; }

}  // namespace

int main(int argc, char** argv) {
  exl3::limit_malloc_arenas();
  exl3::CoordinatorOptions o;
  std::string mode = "tp", split, backend = "cpu", cache_bits = "16,16", int8_activations = "off";
  CLI::App app{"exl3-coordinator: serves the gRPC generate API and drives workers that dial in"};
  app.add_option("--model", o.model_dir, "Model directory (config.json, *.safetensors, tokenizer.json)")->required();
  app.add_option("--world", o.world_size, "Number of workers that will register")->required()->check(CLI::PositiveNumber);
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
  app.add_option("--max-seq-len", o.max_seq_len, "Longest sequence served, prompt + output (default: the model's)");
  app.add_option("--max-batch", o.max_batch, "Sequences running at once")->capture_default_str();
  app.add_option("--cache-tokens", o.cache_tokens,
                 "KV cache size in tokens, the same on every worker (rounded up to whole pages; at least --max-seq-len); "
                 "refused when the caps cannot hold it. Default: --max-batch full-length sequences, or the most that "
                 "fits the caps (at least one)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cache-bits", cache_bits,
                 "KV cache widths K,V (a single N means N,N): each 2..8 = quantized to that many bits per element, or "
                 "16 = full precision (F16 on GPUs, F32 on CPU workers); sent to every worker, and the planner prices "
                 "pages at these widths")
      ->capture_default_str();
  app.add_option("--int8-activations", int8_activations, exl3::int8_activations_flag_help() + "; sent to every worker")
      ->capture_default_str();
  app.add_option("--decode-steps", o.decode_steps, "Decode iterations per worker command")->capture_default_str();
  app.add_flag("--step-pipeline,!--no-step-pipeline", o.step_pipeline,
               "Send each step to the workers while the previous one still runs (decoding sequences continue from "
               "the tokens sampled on the workers; what a sequence that stopped meanwhile computed is discarded), so "
               "the workers never wait for a coordinator round trip between steps. Outputs are the same either way; "
               "--no-step-pipeline: one step at a time. Not used with --draft-model")
      ->capture_default_str();
  app.add_option("--draft-model", o.draft_model_dir,
                 "Speculative decoding: directory of a smaller model with the same tokenizer (e.g. the same model "
                 "at fewer bits per weight); the lowest rank with the head loads it whole and proposes "
                 "--draft-tokens tokens per decode step, which the model verifies in one forward (rejection "
                 "sampling: outputs are distributed exactly as without a draft; greedy output is the same)");
  app.add_option("--draft-tokens", o.draft_tokens, "Tokens the draft model proposes per decode step (1..16)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_flag("--prefix-cache,!--no-prefix-cache", o.prefix_cache,
               "Reuse KV pages of prompt prefixes computed before; --no-prefix-cache or --prefix-cache=false: off")
      ->capture_default_str();
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
  if (const auto bits = exl3::parse_kv_cache_bits(cache_bits, "--cache-bits"); bits.ok()) {
    o.cache_bits = *bits;
  } else {
    std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(bits.status().message()).c_str());
    return 2;
  }
  if (const auto int8 = exl3::parse_int8_activations(int8_activations, "--int8-activations"); int8.ok()) {
    o.int8_activations = *int8;
  } else {
    std::fprintf(stderr, "exl3-coordinator: %s\n", std::string(int8.status().message()).c_str());
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
