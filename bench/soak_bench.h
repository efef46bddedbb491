// exl3-bench soak: many concurrent client loops against an exl3-launch started for the run, for a
// fixed time. Each loop sends streaming Generate calls with random prompt lengths, lengths, and
// sampling settings; a fraction is cancelled by the client or by a short deadline (expected), every
// other call must succeed. Samples the resident memory of the launcher and each of its descendant
// processes every interval; at the end checks that every KV page is free (Stats) and that no
// process grew by the limit or more between warm-up (a quarter of the run) and the last sample
// under load (the size after the load stopped is reported too, but not judged: it drops when the
// load's buffers are released, which would hide growth).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace CLI {
class App;
}  // namespace CLI

namespace exl3 {

struct SoakOptions {
  std::string launch_args;  // arguments for exl3-launch (which gets --port 0 added)
  std::string launch_bin;   // exl3-launch to run; empty = the one beside this program
  int clients = 64;
  double duration_s = 600.0;
  double cancel_fraction = 0.3;   // requests cancelled at a random point or given a short deadline
  double sample_interval_s = 10.0;
  double max_rss_growth_pct = 2.0;
  int max_new_tokens = 128;       // upper bound of the random lengths (also bounded by the context)
  uint64_t seed = 1;
  double request_timeout_s = 300.0;  // deadline of requests that are not meant to be cut short
  double ready_timeout_s = 600.0;
  double stop_timeout_s = 60.0;
  std::vector<std::string> argv;
  std::string json_path;
  std::string markdown_path;
};

// Resident memory (VmRSS) in KiB of a process, or -1 when it cannot be read.
int64_t process_rss_kib(pid_t pid);
// `pid` and all its descendants (through /proc/PID/task/*/children), parents first.
std::vector<pid_t> process_tree(pid_t pid);

struct SoakProcess {
  pid_t pid = 0;
  std::string name;           // /proc/PID/comm
  int64_t warm_rss_kib = -1;  // at the warm-up point
  int64_t end_rss_kib = -1;   // at the last sample under load
  int64_t idle_rss_kib = -1;  // after the load stopped
  double growth_pct() const {
    return warm_rss_kib > 0 && end_rss_kib >= 0 ? 100.0 * static_cast<double>(end_rss_kib - warm_rss_kib) /
                                                      static_cast<double>(warm_rss_kib)
                                                : 0.0;
  }
};

struct SoakReport {
  std::string address;
  double wall_s = 0.0;
  int64_t requests = 0;          // finished calls, whatever their outcome
  int64_t completed = 0;         // finished with OK
  int64_t tokens = 0;            // tokens received, all calls
  int64_t expected_cancellations = 0;  // CANCELLED / DEADLINE_EXCEEDED of calls meant to be cut short
  int64_t other_errors = 0;
  std::vector<std::string> error_samples;  // the first few other errors
  int64_t free_kv_pages = -1;
  int64_t total_kv_pages = -1;
  double warm_at_s = 0.0;
  std::vector<SoakProcess> processes;
  std::vector<std::string> progress;  // the progress lines printed
  bool pages_ok() const { return total_kv_pages > 0 && free_kv_pages == total_kv_pages; }
  bool passed(double max_growth_pct) const;
};

absl::StatusOr<SoakReport> run_soak(const SoakOptions& options, std::FILE* log);
nlohmann::json soak_json(const SoakOptions& options, const SoakReport& report);
std::string soak_markdown(const SoakOptions& options, const SoakReport& report);

// Runs the soak, writes the files and prints the summary; an error when the soak failed its checks.
absl::Status run_soak_command(const SoakOptions& options, std::FILE* log);

void add_soak_subcommand(CLI::App& app, SoakOptions& options);

}  // namespace exl3
