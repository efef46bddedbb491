// Environment capture and the JSON / markdown writers of exl3-bench reports (see bench_report.h).
#include "bench/bench_report.h"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#ifdef EXL3_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "git_commit.h"  // EXL3_GIT_COMMIT, generated in the build tree

namespace exl3 {
namespace {

using json = nlohmann::json;

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The first "model name" line of /proc/cpuinfo, or "unknown".
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t begin = colon + 1;
    while (begin < line.size() && line[begin] == ' ') ++begin;
    return line.substr(begin);
  }
  return "unknown";
}

json cpu_device() {
  return json{{"cpu_model", cpu_model_name()}, {"cores", std::thread::hardware_concurrency()}};
}

#ifdef EXL3_HAVE_CUDA
// CUDA version numbers (1000 · major + 10 · minor) as "major.minor".
std::string cuda_version_string(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

json cuda_device(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return json{{"error", absl::StrCat("cudaGetDeviceProperties(", device, ") failed")}};
  }
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  return json{{"index", device},
              {"name", prop.name},
              {"sms", prop.multiProcessorCount},
              {"memory_bytes", static_cast<uint64_t>(prop.totalGlobalMem)},
              {"compute_capability", absl::StrCat(prop.major, ".", prop.minor)},
              {"driver_version", cuda_version_string(driver)},
              {"runtime_version", cuda_version_string(runtime)}};
}
#endif

std::string fmt(double v, int decimals) { return absl::StrFormat("%.*f", decimals, v); }

}  // namespace

std::string bench_git_commit() { return EXL3_GIT_COMMIT; }

json capture_environment(const std::string& backend, int device, const std::vector<std::string>& argv) {
  json env;
  env["backend"] = backend;
#ifdef EXL3_HAVE_CUDA
  env["device"] = backend == "cuda" ? cuda_device(device) : cpu_device();
#else
  (void)device;
  env["device"] = cpu_device();
#endif
  env["host_cpu"] = cpu_model_name();
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  env["hostname"] = host;
  env["compiler"] = __VERSION__;
#ifdef NDEBUG
  env["build"] = "release";
#else
  env["build"] = "debug";
#endif
#ifdef EXL3_HAVE_CUDA
  env["cuda"] = true;
#else
  env["cuda"] = false;
#endif
  env["commit"] = bench_git_commit();
  env["argv"] = argv;
  env["command"] = absl::StrJoin(argv, " ");
  env["date"] = utc_now_iso8601();
  return env;
}

json model_bench_json(const ModelBenchResult& r) {
  const ModelBenchModelInfo& m = r.model;
  json out;
  out["environment"] = r.environment;
  out["backend"] = r.backend_description;
  out["model"] = json{{"name", m.name},
                      {"architecture", m.architecture},
                      {"shape",
                       {{"hidden_size", m.hidden_size},
                        {"intermediate_size", m.intermediate_size},
                        {"num_layers", m.num_layers},
                        {"num_heads", m.num_heads},
                        {"num_kv_heads", m.num_kv_heads},
                        {"head_dim", m.head_dim},
                        {"vocab_size", m.vocab_size}}},
                      {"bpw", m.decoder_bpw},
                      {"stored_bytes", m.stored_bytes},
                      {"weight_bytes", m.weight_bytes},
                      {"exl3_weights", m.exl3_weights}};
  out["copy_bandwidth_gbs"] = r.copy_bandwidth_gbs;
  out["prefill"] = json::array();
  for (const PrefillRow& p : r.prefill) {
    out["prefill"].push_back(json{{"tokens", p.tokens}, {"seconds", p.seconds}, {"tokens_per_s", p.tokens_per_s}});
  }
  out["decode"] = json::array();
  for (const DecodeRow& d : r.decode) {
    json row{{"batch", d.batch},
             {"steps", d.steps},
             {"mean_context", d.mean_context},
             {"step_ms", d.step_ms},
             {"tokens_per_s", d.tokens_per_s},
             {"weight_bytes", d.weight_bytes},
             {"kv_bytes", d.kv_bytes},
             {"gbs", d.gbs},
             {"copy_fraction", d.copy_fraction}};
    row["exl3_weights_per_ms"] = d.exl3_weights_per_ms ? json(*d.exl3_weights_per_ms) : json(nullptr);
    out["decode"].push_back(std::move(row));
  }
  return out;
}

namespace {

// "- ranks: ..." for a run over several ranks (empty for one): mode, devices, caps, all-reduce,
// and what the roofline's bandwidth is.
std::string ranks_line(const json& env) {
  const int ranks = env.value("ranks", 1);
  if (ranks <= 1) return "";
  std::string line = absl::StrCat("- ranks: ", ranks, ", ", env.value("mode", std::string("tp")) == "tp"
                                                                ? "tensor parallel"
                                                                : "layer split");
  if (env.contains("devices")) absl::StrAppend(&line, ", devices ", env.at("devices").dump());
  if (env.contains("split_gib") && !env.at("split_gib").empty()) {
    absl::StrAppend(&line, ", split ", env.at("split_gib").dump(), " GiB");
  }
  if (env.contains("all_reduce")) absl::StrAppend(&line, ", all-reduce ", env.at("all_reduce").get<std::string>());
  absl::StrAppend(&line, "; times are rank 0's; roofline against ",
                  absl::StrFormat("%.1f", env.value("roofline_bandwidth_gbs", 0.0)), " GB/s\n");
  return line;
}

}  // namespace

std::string model_bench_markdown(const ModelBenchResult& r) {
  const ModelBenchModelInfo& m = r.model;
  std::string s = absl::StrFormat(
      "# exl3-bench model: %s\n\n"
      "- backend: %s\n- model: %s, %d layers, hidden %d, intermediate %d, heads %d/%d, head_dim %d, vocab %d, "
      "%.3f bpw, %.3f GB stored, %.3f GB held by the backend\n"
      "- copy bandwidth: %.1f GB/s (bytes read + written)\n- step graphs: %s; int8 activations: %s; KV cache bits: %s\n"
      "%s- commit %s, %s\n\n",
      m.name, r.backend_description, m.architecture, m.num_layers, m.hidden_size, m.intermediate_size, m.num_heads,
      m.num_kv_heads, m.head_dim, m.vocab_size, m.decoder_bpw, m.stored_bytes / 1e9, m.weight_bytes / 1e9,
      r.copy_bandwidth_gbs, r.environment.value("step_graphs", std::string("off")),
      r.environment.value("int8_activations", std::string("off")),
      r.environment.value("cache_bits", std::string("16,16")), ranks_line(r.environment), bench_git_commit(),
      r.environment.value("date", std::string("unknown")));
  s += "## Prefill\n\n| tokens | ms | tokens/s |\n|---:|---:|---:|\n";
  for (const PrefillRow& p : r.prefill) {
    absl::StrAppend(&s, "| ", p.tokens, " | ", fmt(p.seconds * 1e3, 2), " | ", fmt(p.tokens_per_s, 1), " |\n");
  }
  s += "\n## Decode\n\n"
       "| batch | steps | context | step ms | tokens/s | weights GB | KV GB | GB/s | of copy | EXL3 weights/ms |\n"
       "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const DecodeRow& d : r.decode) {
    absl::StrAppend(&s, "| ", d.batch, " | ", d.steps, " | ", fmt(d.mean_context, 1), " | ", fmt(d.step_ms, 3),
                    " | ", fmt(d.tokens_per_s, 1), " | ", fmt(d.weight_bytes / 1e9, 3), " | ",
                    fmt(d.kv_bytes / 1e9, 4), " | ", fmt(d.gbs, 1), " | ", fmt(100.0 * d.copy_fraction, 1), "% | ",
                    d.exl3_weights_per_ms ? absl::StrFormat("%.4g", *d.exl3_weights_per_ms) : std::string("-"),
                    " |\n");
  }
  return s;
}

absl::Status write_report_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  out << text;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace exl3
