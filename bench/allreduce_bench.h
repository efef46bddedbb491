// exl3-bench allreduce: all-reduce (sum) latency and bandwidth over a sweep of message sizes, N ranks
// as N threads of one process (rendezvous through an in-process store), on NCCL (rank r on GPU r,
// device tensors) or Gloo (loopback TCP, host F32). Reports use nccl-tests' vocabulary
// (PERFORMANCE.md): algbw = bytes / time, busbw = algbw * 2 (n - 1) / n for all-reduce.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace CLI {
class App;
}  // namespace CLI

namespace exl3 {

struct AllreduceBenchOptions {
  std::string backend = "gloo";                  // "gloo", "nccl" or "oneshot" (P2P kernel over NCCL)
  int ranks = 2;                                 // 1..64; NCCL needs this many CUDA devices
  std::string sizes = "1K,16K,64K,1M,16M,256M";  // message sizes in bytes (K, M, G = 2^10, 2^20, 2^30)
  std::string dtype = "f32";                     // f32, f16 or bf16 (Gloo: f32 only)
  int iters = 20;                                // timed all-reduces per size
  int warmup = 5;                                // untimed all-reduces per size before them
  // "host": each all-reduce timed on the host until the communicator sees it done; "graph" (nccl,
  // oneshot): `iters` all-reduces captured in one CUDA graph per rank, timed with CUDA events over
  // kGraphLaunches launches (how a decode step issues them).
  std::string timing = "host";
  std::string oneshot_max = "256K";  // oneshot: parts up to this many bytes go one-shot, the rest NCCL
  int oneshot_blocks = 0;            // oneshot: most blocks per kernel (0 = the SM count)
  std::string json_path;
  std::string markdown_path;
  std::vector<std::string> argv;  // the command line, for the report
};

// Graph timing: launches of each size's graph, each timed (mean and min over them).
inline constexpr int kGraphLaunches = 5;

// One size of the sweep. Times are per all-reduce: each iteration's time is the slowest rank's
// (the collective is done when every rank is); mean and min over the timed iterations (graph
// timing: over the graph launches, each divided by the all-reduces it holds).
struct AllreduceRow {
  int64_t bytes = 0;
  int64_t elements = 0;
  std::string path;  // what ran it: "gloo", "nccl" or "oneshot"
  double mean_us = 0.0;
  double min_us = 0.0;
  double algbw_gbs = 0.0;  // bytes / mean time, GB/s (1e9 bytes)
  double busbw_gbs = 0.0;  // algbw_gbs * allreduce_bus_factor(ranks)
};

struct AllreduceBenchReport {
  std::vector<std::string> devices;  // per rank: the GPU's name (NCCL) or the host CPU (Gloo)
  nlohmann::json environment;
  std::vector<AllreduceRow> rows;
};

// nccl-tests' bus bandwidth factor of all-reduce: 2 (n - 1) / n.
double allreduce_bus_factor(int ranks);

// "1K,16K,64K,1M" to byte counts; a number with an optional K, M or G suffix (binary) per entry.
// INVALID_ARGUMENT naming the bad entry otherwise, or for zero, or an empty list.
absl::StatusOr<std::vector<int64_t>> parse_allreduce_sizes(const std::string& text);

// CUDA devices visible to this process; 0 without CUDA (build or driver).
int allreduce_bench_cuda_devices();

// Checks the options (INVALID_ARGUMENT), then per size: one all-reduce of rank-dependent integer
// inputs whose sums are exact, compared element by element on every rank (INTERNAL with the first
// mismatches and the max error), then warm-up and timed all-reduces. NCCL without CUDA, or with
// fewer devices than ranks, is FAILED_PRECONDITION (UNIMPLEMENTED in a build without CUDA).
absl::StatusOr<AllreduceBenchReport> run_allreduce_bench(const AllreduceBenchOptions& options);

nlohmann::json allreduce_bench_json(const AllreduceBenchOptions& options, const AllreduceBenchReport& report);
std::string allreduce_bench_markdown(const AllreduceBenchOptions& options, const AllreduceBenchReport& report);

// Runs the benchmark, writes the files the options name and prints the markdown on `log`.
absl::Status run_allreduce_bench_command(const AllreduceBenchOptions& options, std::FILE* log);

// Registers `allreduce` on the exl3-bench command line, filling `options` (kept alive by the caller).
void add_allreduce_subcommand(CLI::App& app, AllreduceBenchOptions& options);

}  // namespace exl3
