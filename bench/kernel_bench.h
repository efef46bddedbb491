// exl3-bench kernels: times the ops of one decoder layer (each distinct linear of layer 0, the
// head, rms_norm, silu_mul, rope and decode attention) of a real model on one backend, for several
// row counts, against the copy-bandwidth and GEMM peaks measured in the same run. Results as JSON
// and a markdown table. The attention reads a cache of the backend's kv_dtype, or a quantized one
// with --cache-bits K,V (its bytes are then the words and scales read).
//
// Timing (--timing): `graph` makes `warmup` calls of an op, captures `iters` back-to-back calls
// into one step graph (Backend::capture_step), replays it once to warm up, then times `repeats` replays with the host
// clock around replay + synchronize: the per-call time without the host's launch overhead (mean
// and min over the replays). `host` times `iters` calls issued from the host after `warmup` calls
// (launch overhead included). The default picks graph when the backend supports step graphs. An op
// whose capture fails is host-timed, and its row says so.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/kernel_peaks.h"
#include "nlohmann/json.hpp"

namespace CLI {
class App;
}  // namespace CLI

namespace exl3 {

struct KernelBenchOptions {
  std::string model_dir;
  std::string backend = "cpu";  // cpu | cuda
  int device = 0;               // CUDA device
  std::vector<int64_t> rows = {1, 16, 2048};
  int iters = 20;
  int warmup = 3;                    // untimed calls first (graph: before the capture)
  std::string timing = "auto";       // auto | graph | host
  int repeats = 5;                   // graph timing: timed replays
  int64_t attention_context = 1024;  // positions each decode query attends to
  int64_t max_attention_seqs = 256;  // attention runs min(rows, this) sequences of one token
  std::string cache_bits = "16,16";  // the attention's cache widths: --cache-bits K,V (or N), 16: full
  std::string int8_activations = "off";  // --int8-activations off|auto|on (kernels/int8_activations.h)
  uint64_t cpu_copy_bytes = uint64_t{128} << 20;
  uint64_t cuda_copy_bytes = uint64_t{1} << 30;
  int64_t gemm_n = 8192;
  std::vector<std::string> argv;  // the command line, for the report's environment
  std::string json_path;          // empty: no JSON file
  std::string markdown_path;      // empty: no markdown file
};

struct OpTiming {
  std::string op;                  // linear, rms_norm, silu_mul, rope, attention
  std::vector<std::string> names;  // linears of this shape (q_proj, ...); empty for other ops
  int64_t rows = 0;                // rows of x (attention: sequences)
  int64_t in_features = 0, out_features = 0;
  int bits = 0;  // linears: K, or 16/32 for dense
  bool exl3 = false;
  double us = 0.0;               // mean per call
  std::optional<double> min_us;  // graph timing: the fastest replay's per-call time
  std::string timing;            // graph | host: how this op was timed
  std::string note;              // why an op meant for graph timing was host-timed, else empty
  double bytes = 0.0;            // bytes read + written per call (weights as the backend holds them)
  double flops = 0.0;            // per call
  double gb_per_s() const { return bytes / us / 1e3; }
  double flop_per_s() const { return flops / us * 1e6; }
  // EXL3 linears: weights (in x out) decoded per millisecond.
  std::optional<double> weights_per_ms() const;
};

struct KernelBenchReport {
  std::string backend_description;
  std::string timing;  // graph | host: the method asked for (auto resolved)
  std::string activation_dtype, kv_dtype;
  nlohmann::json model;  // shape facts of the model
  MeasuredPeaks peaks;
  std::vector<OpTiming> ops;
};

// Loads the model on the chosen backend and times every op. INVALID_ARGUMENT for bad options,
// UNIMPLEMENTED for --backend cuda without CUDA, the loader's errors otherwise.
absl::StatusOr<KernelBenchReport> run_kernel_bench(const KernelBenchOptions& options);

nlohmann::json kernel_bench_json(const KernelBenchOptions& options, const KernelBenchReport& report);
std::string kernel_bench_markdown(const KernelBenchOptions& options, const KernelBenchReport& report);

// Runs the benchmark and writes the files the options name; prints the markdown on `log`.
absl::Status run_kernel_bench_command(const KernelBenchOptions& options, std::FILE* log);

// Registers `kernels` on the exl3-bench command line, filling `options` (kept alive by the caller).
void add_kernels_subcommand(CLI::App& app, KernelBenchOptions& options);

}  // namespace exl3
