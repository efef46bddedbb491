// exl3-bench serve: N concurrent clients streaming Generate through the public gRPC API (greedy,
// ignore_eos, a fixed prompt of token ids), against a running server (--server) or an exl3-launch
// started for the run (--launch). Per client count: time to first token and inter-token latency
// percentiles, and total tokens per second. Results as JSON and a markdown table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace CLI {
class App;
}  // namespace CLI

namespace exl3 {

struct ServeBenchOptions {
  std::string server;       // HOST:PORT of a running server, or
  std::string launch_args;  // arguments for exl3-launch (which gets --port 0 added)
  std::string launch_bin;   // exl3-launch to run; empty = the one beside this program
  std::vector<int> clients = {1, 4, 16};
  int max_new_tokens = 128;
  int prompt_tokens = 128;
  double request_timeout_s = 600.0;  // deadline of each Generate call
  double ready_timeout_s = 600.0;    // for the launcher's "serving on" line
  double stop_timeout_s = 60.0;      // for the launcher to exit after SIGTERM (then SIGKILL)
  std::vector<std::string> argv;  // the command line, for the report's environment
  std::string json_path;
  std::string markdown_path;
};

// Nearest-rank percentile (p in [0, 100]) of `values`; 0 when empty.
double percentile(std::vector<double> values, double p);

struct ServeRound {
  int clients = 0;
  int64_t total_tokens = 0;
  double wall_s = 0.0;         // first request sent to last stream finished
  std::vector<double> ttft_s;  // one per request
  std::vector<double> itl_s;   // one per token after each request's first (see serve_bench.cpp)
  double tokens_per_s() const { return wall_s > 0.0 ? static_cast<double>(total_tokens) / wall_s : 0.0; }
};

struct ServeBenchReport {
  std::string address;
  bool launched = false;
  std::vector<ServeRound> rounds;
};

absl::StatusOr<ServeBenchReport> run_serve_bench(const ServeBenchOptions& options);
nlohmann::json serve_bench_json(const ServeBenchOptions& options, const ServeBenchReport& report);
std::string serve_bench_markdown(const ServeBenchOptions& options, const ServeBenchReport& report);

// Runs the benchmark, writes the files the options name and prints the markdown on `log`.
absl::Status run_serve_bench_command(const ServeBenchOptions& options, std::FILE* log);

// Registers `serve` on the exl3-bench command line, filling `options` (kept alive by the caller).
void add_serve_subcommand(CLI::App& app, ServeBenchOptions& options);

}  // namespace exl3
