// exl3-launch: serve an EXL3 (or HF) Llama-family model over one worker process per device.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/planner/byte_units.h"
#include "coordinator/server/malloc_arenas.h"
#include "coordinator/server/public_api_flags.h"
#include "coordinator/server/serving_flags.h"
#include "launch/gpu_probe.h"
#include "launch/launcher.h"

namespace {

std::string self_dir() {
  char buf[PATH_MAX] = {0};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::filesystem::path(std::string(buf, n)).parent_path().string() : ".";
}

}  // namespace

int main(int argc, char** argv) {
  exl3::limit_malloc_arenas();
  exl3::LaunchOptions o;
  exl3::CoordinatorOptions& c = o.coordinator;
  std::string gpus, split, mode = "tp";
  std::string step_graphs = "on";
  int cpu_workers = 0;
  double ready_timeout_s = 120, step_timeout_s = 60;
  CLI::App app{"exl3-launch: serve a Llama-family EXL3 or HF model over one worker per device, with a gRPC API.\n"
               "Devices: --gpus 0,1 runs one worker per GPU on our CUDA kernels, all-reducing through NCCL; "
               "--cpu-workers N runs N workers on the CPU, all-reducing through Gloo; with neither, every visible "
               "GPU is used. The two never mix and nothing falls back from one to the other."};
  app.add_option("--model", c.model_dir, "Model directory (config.json, *.safetensors, tokenizer.json)")->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--gpus", gpus,
                 "GPU indices to use, e.g. 0,1: one CUDA worker per GPU (rank r on the r-th listed GPU, started with "
                 "CUDA_VISIBLE_DEVICES set to it alone), NCCL collectives. Indices count the GPUs this process sees "
                 "(within its own CUDA_VISIBLE_DEVICES). Default: every visible GPU");
  app.add_option("--cpu-workers", cpu_workers,
                 "Run N workers on the CPU instead (reference kernels + BLAS, Gloo collectives); not with --gpus")
      ->check(CLI::Range(1, 1024));
  app.add_option("--split", split,
                 "Per-worker memory caps in GiB, comma separated, e.g. 20,24: hard caps the planner fits each worker's "
                 "shard into. With GPUs: per GPU, for the whole worker process (weights, KV cache, workspace, CUDA "
                 "context, NCCL buffers); default each GPU's free memory. On the CPU: default available RAM shared "
                 "equally. --plan-only --gpus needs it (the plan is made without touching the GPUs)");
  app.add_option("--mode", mode, "Sharding: tp (tensor parallel: heads and MLP columns split, all-reduce) or layers "
                                 "(contiguous layer ranges)")
      ->check(CLI::IsMember({"tp", "layers"}))->capture_default_str();
  app.add_option("--host", c.host,
                 "Address of the public gRPC API (127.0.0.1: this machine only; 0.0.0.0: every interface)")
      ->capture_default_str();
  app.add_option("--port", c.port, "Port of the public gRPC API (0 = any free port, printed at start; a port in use is an error, never "
                 "shared)")
      ->capture_default_str();
  app.add_option("--control-port", c.control_port, "Port of the worker control plane (0 = any free port; a port in use is an error)")
      ->capture_default_str();
  exl3::ServingFlagText serving;
  exl3::add_serving_flags(app, c, serving);
  app.add_option("--page-size", c.page_size, "KV cache page size in tokens")->capture_default_str();
  app.add_option("--prefill-chunk", c.prefill_chunk, "Most prompt tokens of one sequence per step")
      ->capture_default_str();
  app.add_option("--ready-timeout", ready_timeout_s, "Seconds for all workers to connect")->capture_default_str();
  app.add_option("--step-timeout", step_timeout_s, "Seconds one step (and each collective) may take")
      ->capture_default_str();
  app.add_flag("--restart", o.restart, "When a worker dies, restart the group and serve again (up to 3 times)");
  app.add_flag("--plan-only", o.plan_only, "Print the shard plan (per-rank layers, heads, columns, bytes) and exit");
  app.add_option("--worker-bin", o.worker_bin, "Path of exl3-worker (default: beside exl3-launch)");
  app.add_option("--step-graphs", step_graphs,
                 "GPU workers: on: decode steps replay one CUDA graph per batch size and page bucket; off: launch "
                 "every op (passed to every worker)")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  exl3::PublicApiFiles api_files;
  exl3::add_public_api_flags(app, c, api_files);
  exl3::OpenAiGatewayOptions& gw = o.openai;
  const char* env_python = std::getenv("EXL3_GATEWAY_PYTHON");
  const char* env_script = std::getenv("EXL3_GATEWAY_SCRIPT");
  gw.python = env_python != nullptr ? env_python : "";
  gw.script = env_script != nullptr ? env_script : "";
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) o.visible_devices = visible;
  if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') o.temp_dir = tmp;
  double openai_ready_timeout_s = 60;
  const char* openai_group = "OpenAI-compatible HTTP API (gateway/exl3-gateway, a Python service)";
  app.add_option("--openai-port", gw.port,
                 "Also serve the OpenAI API (/v1/models, /v1/completions, /v1/chat/completions, streaming as "
                 "server-sent events) on this port (0 = any free port), through a gateway process started once the "
                 "gRPC API serves and stopped with the rest; printed as \"openai api on http://HOST:PORT\". The "
                 "gateway talks to the coordinator through the public gRPC API only. Needs scripts/setup's "
                 "build/gateway-venv. Default: off")
      ->check(CLI::Range(0, 65535))->group(openai_group);
  app.add_option("--openai-host", gw.host,
                 "Address of the OpenAI API (127.0.0.1: this machine only; 0.0.0.0: every interface)")
      ->capture_default_str()->group(openai_group);
  app.add_option("--openai-api-key-file", gw.api_key_file,
                 "File holding the API key OpenAI clients must send (\"Authorization: Bearer KEY\"; others get 401). "
                 "Default: no key")
      ->check(CLI::ExistingFile)->group(openai_group);
  app.add_option("--openai-chat-template", gw.chat_template,
                 "Jinja chat template file for /v1/chat/completions instead of the model's (tokenizer_config.json "
                 "chat_template or chat_template.jinja); a model without one serves completions only")
      ->check(CLI::ExistingFile)->group(openai_group);
  app.add_option("--openai-model-name", gw.model_name,
                 "Model name OpenAI clients send and /v1/models lists (default: the model folder's name)")
      ->group(openai_group);
  app.add_option("--openai-python", gw.python,
                 "Python interpreter with the gateway's packages (env EXL3_GATEWAY_PYTHON; default: "
                 "build/gateway-venv/bin/python of the checkout holding exl3-launch, made by scripts/setup)")
      ->group(openai_group);
  app.add_option("--openai-gateway", gw.script,
                 "Path of gateway/exl3-gateway (env EXL3_GATEWAY_SCRIPT; default: found in the checkout holding "
                 "exl3-launch)")
      ->group(openai_group);
  app.add_option("--openai-grpc-tls-ca", gw.grpc_tls_ca,
                 "With --tls-cert: the CA the gateway verifies the gRPC API's certificate with (default: --tls-cert "
                 "itself, right for a self-signed certificate)")
      ->group(openai_group);
  app.add_option("--openai-ready-timeout", openai_ready_timeout_s, "Seconds for the gateway to start listening")
      ->capture_default_str()->group(openai_group);
  CLI11_PARSE(app, argc, argv);
  o.step_graphs = step_graphs == "on";
  if (const absl::Status st = exl3::apply_serving_flags(serving, c); !st.ok()) {
    std::fprintf(stderr, "exl3-launch: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (const absl::Status s = exl3::apply_public_api_flags(api_files, c); !s.ok()) {
    std::fprintf(stderr, "exl3-launch: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  if (!gpus.empty() && cpu_workers > 0) {
    std::fprintf(stderr, "exl3-launch: --gpus and --cpu-workers exclude each other: --gpus runs CUDA workers (NCCL), "
                         "--cpu-workers runs CPU workers (Gloo); pass one\n");
    return 2;
  }
  if (cpu_workers > 0) {
    c.world_size = cpu_workers;
    c.backend = exl3::BackendKind::kCpu;
  } else {
    const bool gpus_given = !gpus.empty();
    if (gpus_given) {
      const auto ids = exl3::parse_gpu_list(gpus);
      if (!ids.ok()) {
        std::fprintf(stderr, "exl3-launch: %s\n", std::string(ids.status().message()).c_str());
        return 2;
      }
      o.gpus = *ids;
    }
    // --plan-only with an explicit --gpus and --split plans without touching a GPU; anything that
    // starts workers (or picks the GPUs itself) needs them to be there.
    const bool needs_gpus = !(o.plan_only && gpus_given);
    if (needs_gpus) {
      const exl3::GpuProbe probe = exl3::probe_gpus();
      const char* visible = o.visible_devices ? o.visible_devices->c_str() : nullptr;
      if (!probe.built_with_cuda) {
        std::fprintf(stderr, "exl3-launch: %s: this build has no CUDA backend (built without CUDA): pass --cpu-workers N "
                             "to run on the CPU, or rebuild with -DEXL3_CUDA=ON\n",
                     gpus_given ? "--gpus" : "no --gpus or --cpu-workers given");
        return 2;
      }
      if (probe.count == 0) {
        std::fprintf(stderr, "exl3-launch: no GPU visible (CUDA_VISIBLE_DEVICES=%s%s%s): pass --cpu-workers N to run on "
                             "the CPU\n",
                     visible == nullptr ? "<unset>" : visible, probe.error.empty() ? "" : "; ", probe.error.c_str());
        return 2;
      }
      if (!gpus_given) {
        for (int i = 0; i < probe.count; ++i) o.gpus.push_back(i);
      }
      for (int id : o.gpus) {
        if (id >= probe.count) {
          std::fprintf(stderr, "exl3-launch: --gpus: GPU %d is not visible (%d GPU(s) visible, CUDA_VISIBLE_DEVICES=%s); "
                               "pass --cpu-workers N to run on the CPU\n",
                       id, probe.count, visible == nullptr ? "<unset>" : visible);
          return 2;
        }
      }
    }
    if (o.plan_only && split.empty()) {
      std::fprintf(stderr, "exl3-launch: --plan-only --gpus needs --split GIB,... (one cap per GPU): the plan is made "
                           "without touching the GPUs\n");
      return 2;
    }
    c.world_size = static_cast<int>(o.gpus.size());
    c.backend = exl3::BackendKind::kCuda;
  }
  c.mode = *exl3::parse_plan_mode(mode);
  c.worker_timeout = std::chrono::milliseconds(static_cast<int64_t>(ready_timeout_s * 1000));
  c.step_timeout = std::chrono::milliseconds(static_cast<int64_t>(step_timeout_s * 1000));
  c.model_dir = std::filesystem::absolute(c.model_dir).string();
  if (!split.empty()) {
    const auto gibs = exl3::parse_gib_list(split);
    if (!gibs.ok()) {
      std::fprintf(stderr, "exl3-launch: %s\n", std::string(gibs.status().message()).c_str());
      return 2;
    }
    o.split_gib = *gibs;
    if (static_cast<int>(o.split_gib.size()) != c.world_size) {
      std::fprintf(stderr, "exl3-launch: --split has %zu values for %d workers\n", o.split_gib.size(), c.world_size);
      return 2;
    }
  }
  if (gw.enabled() && !o.plan_only) {
    const std::optional<std::string> root = exl3::find_gateway_root(self_dir());
    if (gw.script.empty() && root) gw.script = *root + "/gateway/exl3-gateway";
    if (gw.python.empty() && root) gw.python = *root + "/build/gateway-venv/bin/python";
    if (gw.script.empty() || access(gw.script.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "exl3-launch: --openai-port: the gateway %s is not readable: pass --openai-gateway "
                           "PATH/gateway/exl3-gateway (or set EXL3_GATEWAY_SCRIPT)\n",
                   gw.script.empty() ? "(no gateway/exl3-gateway above this executable)" : gw.script.c_str());
      return 2;
    }
    if (gw.python.empty() || access(gw.python.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "exl3-launch: --openai-port: the gateway's Python %s is not executable: run scripts/setup "
                           "(it makes build/gateway-venv) or pass --openai-python (or set EXL3_GATEWAY_PYTHON)\n",
                   gw.python.empty() ? "(none found)" : gw.python.c_str());
      return 2;
    }
    gw.grpc_auth_token_file = api_files.auth_token_file;
    if (gw.grpc_tls_ca.empty()) gw.grpc_tls_ca = api_files.tls_cert;
    gw.ready_timeout = std::chrono::milliseconds(static_cast<int64_t>(openai_ready_timeout_s * 1000));
  }
  if (o.worker_bin.empty()) o.worker_bin = self_dir() + "/exl3-worker";
  if (!o.plan_only && access(o.worker_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "exl3-launch: worker binary %s is not executable (--worker-bin)\n", o.worker_bin.c_str());
    return 2;
  }
  std::string devices = absl::StrCat(c.world_size, " CPU worker(s) (Gloo)");
  if (c.backend == exl3::BackendKind::kCuda) {
    devices = absl::StrCat(c.world_size, " GPU worker(s) on GPU(s) ", absl::StrJoin(o.gpus, ","), " (NCCL)");
  }
  // CPU workers all-reduce through Gloo (a group of them refuses --all-reduce oneshot).
  std::string all_reduce = exl3::all_reduce_mode_name(c.all_reduce);
  if (c.backend == exl3::BackendKind::kCpu && c.all_reduce == exl3::AllReduceMode::kNccl) all_reduce = "gloo";
  if (c.all_reduce == exl3::AllReduceMode::kOneshot) {
    all_reduce = absl::StrCat(all_reduce, " (parts up to ", c.all_reduce_oneshot_max_kib, " KiB)");
  }
  std::fprintf(stderr,
               "exl3-launch: model %s, %s, mode %s, max-seq-len %lld, max-batch %lld, cache-bits %s, int8-activations "
               "%s, all-reduce %s\n",
               c.model_dir.c_str(), devices.c_str(), mode.c_str(), static_cast<long long>(c.max_seq_len),
               static_cast<long long>(c.max_batch), exl3::kv_cache_bits_name(c.cache_bits).c_str(),
               exl3::int8_activations_name(c.int8_activations).c_str(), all_reduce.c_str());
  return exl3::run_launcher(o);
}
