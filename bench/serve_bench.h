// exl3-bench serve: N concurrent clients streaming Generate through the public gRPC API (greedy,
// ignore_eos, a fixed prompt of token ids), against a running server (--server) or an exl3-launch
// started for the run (--launch). Per client count: time to first token and inter-token latency
// percentiles, and total tokens per second. Results as JSON and a markdown table. With
// --stop-strings N one extra, unmeasured client streams alongside with N stop strings that never
// match, to time what the largest stop set costs the other streams. The launcher, the stream reader
// and the status conversion are shared with soak mode (soak_bench.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "launch/process/unique_fd.h"
#include "nlohmann/json.hpp"
#include "proto/inference.grpc.pb.h"

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
  int stop_strings = 0;       // > 0: the extra client's stop strings (it is not measured)
  int stop_string_bytes = 16; // bytes of each of them
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
  int64_t extra_requests = 0;  // the unmeasured stop-string client's finished requests and tokens
  int64_t extra_tokens = 0;
  double tokens_per_s() const { return wall_s > 0.0 ? static_cast<double>(total_tokens) / wall_s : 0.0; }
};

struct ServeBenchReport {
  std::string address;
  bool launched = false;
  std::vector<ServeRound> rounds;
};

using BenchClock = std::chrono::steady_clock;

// An exl3-launch started for a run (with --port 0 added): stopped with SIGTERM (then SIGKILL after
// a deadline) and reaped by stop() or the destructor. Created on the thread that outlives it.
class LaunchedServer {
 public:
  // `bin` empty = the exl3-launch beside this program; `args` split on spaces.
  static absl::StatusOr<std::unique_ptr<LaunchedServer>> start(const std::string& bin, const std::string& args,
                                                               double ready_timeout_s);
  ~LaunchedServer();
  LaunchedServer(const LaunchedServer&) = delete;
  LaunchedServer& operator=(const LaunchedServer&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // SIGTERM, then SIGKILL when it has not exited by the deadline.
  absl::Status stop(double timeout_s);

 private:
  LaunchedServer() = default;
  bool wait_exit(BenchClock::time_point deadline);
  absl::StatusOr<std::string> serving_address(BenchClock::time_point deadline);

  pid_t pid_ = -1;
  bool reaped_ = false;
  UniqueFd stdout_;
  std::string address_;
};

struct StreamResult {
  absl::Status status;
  int64_t tokens = 0;
  double ttft_s = 0.0;
  std::vector<double> itl_s;
  BenchClock::time_point end;
};

// One streaming Generate of `req` with a deadline of timeout_s; when cancel_after_tokens >= 0 the
// client cancels the call once that many tokens have arrived (0: right after sending). Tokens that
// arrive in one response share its gap since the previous response evenly (the first response's
// extra tokens count 0). `what` names the call in error messages.
StreamResult stream_generate(v1::Inference::Stub& stub, const v1::GenerateRequest& req, double timeout_s,
                             int64_t cancel_after_tokens, absl::string_view what);

// gRPC and absl share the canonical code numbering.
absl::Status from_grpc(const grpc::Status& st, absl::string_view what);

// `count` stop strings of `bytes` bytes each, of the control bytes 0x01..0x08 (fixed seed), that
// generated text will not contain.
std::vector<std::string> unmatched_stop_strings(int count, int bytes);

absl::StatusOr<ServeBenchReport> run_serve_bench(const ServeBenchOptions& options);
nlohmann::json serve_bench_json(const ServeBenchOptions& options, const ServeBenchReport& report);
std::string serve_bench_markdown(const ServeBenchOptions& options, const ServeBenchReport& report);

// Runs the benchmark, writes the files the options name and prints the markdown on `log`.
absl::Status run_serve_bench_command(const ServeBenchOptions& options, std::FILE* log);

// Registers `serve` on the exl3-bench command line, filling `options` (kept alive by the caller).
void add_serve_subcommand(CLI::App& app, ServeBenchOptions& options);

}  // namespace exl3
