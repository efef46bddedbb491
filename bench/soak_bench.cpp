// exl3-bench soak: a bounded load of random streaming clients with memory sampling (see soak_bench.h).
#include "bench/soak_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_report.h"
#include "bench/serve_bench.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/inference.grpc.pb.h"

namespace exl3 {
namespace {

using Clock = BenchClock;

Clock::time_point after(Clock::time_point t, double s) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string process_name(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/comm"));
  std::string name;
  std::getline(in, name);
  return name.empty() ? "?" : name;
}

// Counters shared by the client loops and the sampler.
struct SoakCounters {
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> completed{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int64_t> expected{0};
  std::atomic<int64_t> errors{0};
  std::mutex mu;
  std::vector<std::string> error_samples;

  void error(std::string message) {
    errors.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    if (error_samples.size() < 10) error_samples.push_back(std::move(message));
  }
};

// One client loop: random requests until `end`, each classified into the counters.
void client_loop(const std::string& address, const SoakOptions& o, int32_t vocab, int32_t max_context, int client,
                 Clock::time_point end, SoakCounters& counters) {
  std::unique_ptr<v1::Inference::Stub> stub =
      v1::Inference::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  std::mt19937_64 rng(o.seed * 1000003u + static_cast<uint64_t>(client));
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  auto integer = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int32_t max_prompt = std::max(1, std::min(256, max_context / 2));
  for (int64_t n = 0; Clock::now() < end; ++n) {
    v1::GenerateRequest req;
    req.set_request_id(absl::StrCat("soak-", client, "-", n));
    const int64_t prompt = integer(1, max_prompt);
    for (int64_t i = 0; i < prompt; ++i) req.mutable_prompt_tokens()->add_ids(static_cast<int32_t>(integer(0, vocab - 1)));
    req.set_add_bos(false);
    const int64_t max_new = integer(1, std::max<int64_t>(1, std::min<int64_t>(o.max_new_tokens, max_context - prompt)));
    v1::SamplingParams* s = req.mutable_sampling();
    if (integer(0, 4) == 0) {
      s->set_temperature(0.0f);
    } else {
      s->set_temperature(static_cast<float>(uniform(0.1, 1.5)));
      s->set_top_k(static_cast<int32_t>(integer(0, 64)));
      s->set_top_p(static_cast<float>(uniform(0.5, 1.0)));
      s->set_min_p(static_cast<float>(uniform(0.0, 0.2)));
      s->set_repetition_penalty(static_cast<float>(uniform(1.0, 1.3)));
      s->set_presence_penalty(static_cast<float>(uniform(-0.5, 0.5)));
      s->set_frequency_penalty(static_cast<float>(uniform(-0.5, 0.5)));
      s->set_seed(rng());
    }
    const bool ignore_eos = integer(0, 1) == 1;
    req.mutable_stopping()->set_max_new_tokens(static_cast<int32_t>(max_new));
    req.mutable_stopping()->set_ignore_eos(ignore_eos);
    const bool cut = uniform(0.0, 1.0) < o.cancel_fraction;
    double timeout_s = o.request_timeout_s;
    int64_t cancel_after = -1;
    if (cut && integer(0, 1) == 0) {
      timeout_s = uniform(0.01, 1.0);
    } else if (cut) {
      cancel_after = integer(0, max_new - 1);
    }
    const StreamResult r =
        stream_generate(*stub, req, timeout_s, cancel_after, absl::StrCat("Generate ", req.request_id()));
    counters.requests.fetch_add(1);
    counters.tokens.fetch_add(r.tokens);
    if (r.tokens > max_new) {
      counters.error(absl::StrCat(req.request_id(), ": ", r.tokens, " tokens, more than max_new_tokens ", max_new));
    } else if (r.status.ok()) {
      if (!cut && ignore_eos && r.tokens != max_new) {
        counters.error(absl::StrCat(req.request_id(), ": ", r.tokens, " tokens with ignore_eos, asked ", max_new));
      } else {
        counters.completed.fetch_add(1);
      }
    } else if (cut && (r.status.code() == absl::StatusCode::kCancelled ||
                       r.status.code() == absl::StatusCode::kDeadlineExceeded)) {
      counters.expected.fetch_add(1);
    } else {
      counters.error(r.status.ToString());
    }
  }
}

absl::Status validate(const SoakOptions& o) {
  if (o.launch_args.empty()) return absl::InvalidArgumentError("--launch \"ARGS\" is required");
  if (o.clients < 1) return absl::InvalidArgumentError("--clients must be at least 1");
  if (!(o.duration_s > 0.0)) return absl::InvalidArgumentError("--duration must be positive");
  if (o.cancel_fraction < 0.0 || o.cancel_fraction > 1.0) {
    return absl::InvalidArgumentError("--cancel-fraction must be in [0, 1]");
  }
  if (!(o.sample_interval_s > 0.0)) return absl::InvalidArgumentError("--sample-interval must be positive");
  return absl::OkStatus();
}

std::string rss_list(const std::vector<pid_t>& pids) {
  std::vector<std::string> parts;
  for (pid_t p : pids) {
    parts.push_back(absl::StrFormat("%s[%d]=%.1fMiB", process_name(p), p, static_cast<double>(process_rss_kib(p)) / 1024.0));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace

int64_t process_rss_kib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int64_t kib = -1;
      fields >> kib;
      return kib;
    }
  }
  return -1;
}

std::vector<pid_t> process_tree(pid_t root) {
  std::vector<pid_t> out = {root};
  for (size_t i = 0; i < out.size(); ++i) {
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", out[i], "/task"), ec)) {
      std::ifstream in(task.path() / "children");
      pid_t child = 0;
      while (in >> child) {
        if (std::find(out.begin(), out.end(), child) == out.end()) out.push_back(child);
      }
    }
  }
  return out;
}

bool SoakReport::passed(double max_growth_pct) const {
  if (other_errors != 0 || !pages_ok() || processes.empty()) return false;
  for (const SoakProcess& p : processes) {
    if (p.warm_rss_kib <= 0 || p.end_rss_kib < 0 || p.growth_pct() >= max_growth_pct) return false;
  }
  return true;
}

absl::StatusOr<SoakReport> run_soak(const SoakOptions& o, std::FILE* log) {
  if (absl::Status st = validate(o); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<LaunchedServer>> launched =
      LaunchedServer::start(o.launch_bin, o.launch_args, o.ready_timeout_s);
  if (!launched.ok()) return launched.status();
  LaunchedServer& server = **launched;
  SoakReport report;
  report.address = server.address();
  std::unique_ptr<v1::Inference::Stub> stub =
      v1::Inference::NewStub(grpc::CreateChannel(report.address, grpc::InsecureChannelCredentials()));

  absl::Status failure = [&]() -> absl::Status {
    v1::ModelInfoResponse info;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      if (absl::Status st = from_grpc(stub->ModelInfo(&ctx, v1::ModelInfoRequest(), &info), "ModelInfo"); !st.ok()) {
        return st;
      }
    }
    SoakCounters counters;
    const Clock::time_point start = Clock::now();
    const Clock::time_point end = after(start, o.duration_s);
    std::vector<std::thread> threads;
    for (int c = 0; c < o.clients; ++c) {
      threads.emplace_back(client_loop, std::cref(report.address), std::cref(o), info.vocab_size(),
                           info.max_context(), c, end, std::ref(counters));
    }
    // Sample at every interval and at the warm-up point (a quarter of the run).
    report.warm_at_s = o.duration_s / 4.0;
    std::vector<double> times;
    for (double t = o.sample_interval_s; t < o.duration_s; t += o.sample_interval_s) times.push_back(t);
    times.push_back(report.warm_at_s);
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    int64_t last_tokens = 0;
    double last_t = 0.0;
    bool warm_taken = false;
    for (double t : times) {
      std::this_thread::sleep_until(after(start, t));
      const double now_s = std::chrono::duration<double>(Clock::now() - start).count();
      const std::vector<pid_t> pids = process_tree(server.pid());
      if (!warm_taken && t >= report.warm_at_s) {
        warm_taken = true;
        for (pid_t p : pids) report.processes.push_back({p, process_name(p), process_rss_kib(p), -1, -1});
      }
      for (SoakProcess& p : report.processes) p.end_rss_kib = process_rss_kib(p.pid);
      const int64_t tokens = counters.tokens.load();
      const std::string line = absl::StrFormat(
          "[soak %6.1f s] requests %lld  tokens/s %.1f  expected cancellations %lld  other errors %lld  rss %s",
          now_s, static_cast<long long>(counters.requests.load()),
          static_cast<double>(tokens - last_tokens) / std::max(1e-9, now_s - last_t),
          static_cast<long long>(counters.expected.load()), static_cast<long long>(counters.errors.load()),
          rss_list(pids));
      last_tokens = tokens;
      last_t = now_s;
      report.progress.push_back(line);
      if (log != nullptr) {
        std::fprintf(log, "%s\n", line.c_str());
        std::fflush(log);
      }
    }
    for (std::thread& th : threads) th.join();
    report.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    for (SoakProcess& p : report.processes) p.idle_rss_kib = process_rss_kib(p.pid);
    report.requests = counters.requests.load();
    report.completed = counters.completed.load();
    report.tokens = counters.tokens.load();
    report.expected_cancellations = counters.expected.load();
    report.other_errors = counters.errors.load();
    report.error_samples = counters.error_samples;
    // Cancelled streams release their pages asynchronously: give the server a moment.
    const Clock::time_point stats_deadline = after(Clock::now(), 15.0);
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::StatsResponse stats;
      if (absl::Status st = from_grpc(stub->Stats(&ctx, v1::StatsRequest(), &stats), "Stats"); !st.ok()) return st;
      report.free_kv_pages = stats.free_kv_pages();
      report.total_kv_pages = stats.total_kv_pages();
      if (report.pages_ok() || Clock::now() >= stats_deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return absl::OkStatus();
  }();
  absl::Status stopped = server.stop(o.stop_timeout_s);
  if (failure.ok()) failure = stopped;
  if (!failure.ok()) return failure;
  return report;
}

nlohmann::json soak_json(const SoakOptions& o, const SoakReport& r) {
  nlohmann::json processes = nlohmann::json::array();
  for (const SoakProcess& p : r.processes) {
    processes.push_back({{"pid", p.pid},
                         {"name", p.name},
                         {"warm_rss_kib", p.warm_rss_kib},
                         {"end_rss_kib", p.end_rss_kib},
                         {"idle_rss_kib", p.idle_rss_kib},
                         {"growth_pct", p.growth_pct()},
                         {"pass", p.warm_rss_kib > 0 && p.end_rss_kib >= 0 && p.growth_pct() < o.max_rss_growth_pct}});
  }
  return {{"mode", "soak"},
          {"environment", capture_environment("client", 0, o.argv)},
          {"server", r.address},
          {"launch_args", o.launch_args},
          {"clients", o.clients},
          {"duration_s", o.duration_s},
          {"wall_s", r.wall_s},
          {"cancel_fraction", o.cancel_fraction},
          {"max_new_tokens", o.max_new_tokens},
          {"seed", o.seed},
          {"requests", r.requests},
          {"completed", r.completed},
          {"tokens", r.tokens},
          {"tokens_per_s", r.wall_s > 0 ? static_cast<double>(r.tokens) / r.wall_s : 0.0},
          {"expected_cancellations", r.expected_cancellations},
          {"other_errors", r.other_errors},
          {"error_samples", r.error_samples},
          {"free_kv_pages", r.free_kv_pages},
          {"total_kv_pages", r.total_kv_pages},
          {"pages_ok", r.pages_ok()},
          {"warm_at_s", r.warm_at_s},
          {"max_rss_growth_pct", o.max_rss_growth_pct},
          {"processes", processes},
          {"progress", r.progress},
          {"passed", r.passed(o.max_rss_growth_pct)}};
}

std::string soak_markdown(const SoakOptions& o, const SoakReport& r) {
  std::string md = absl::StrFormat(
      "### exl3-bench soak: %d clients for %.0f s (exl3-launch %s)\n\n"
      "%.0f%% of requests cut short by the client (cancel or short deadline). Result: **%s**.\n\n"
      "| requests | completed | tokens | tokens/s | expected cancellations | other errors | free / total KV pages |\n"
      "|---:|---:|---:|---:|---:|---:|---:|\n"
      "| %lld | %lld | %lld | %.1f | %lld | %lld | %lld / %lld |\n\n",
      o.clients, o.duration_s, o.launch_args, 100.0 * o.cancel_fraction, r.passed(o.max_rss_growth_pct) ? "pass" : "FAIL",
      static_cast<long long>(r.requests), static_cast<long long>(r.completed), static_cast<long long>(r.tokens),
      r.wall_s > 0 ? static_cast<double>(r.tokens) / r.wall_s : 0.0, static_cast<long long>(r.expected_cancellations),
      static_cast<long long>(r.other_errors), static_cast<long long>(r.free_kv_pages),
      static_cast<long long>(r.total_kv_pages));
  absl::StrAppendFormat(&md,
                        "Resident memory from warm-up (%.0f s) to the last sample under load, limit < %.1f%% (after "
                        "the load stopped: not judged):\n\n",
                        r.warm_at_s, o.max_rss_growth_pct);
  md += "| process | pid | RSS warm MiB | RSS end of load MiB | growth % | | RSS after load MiB |\n"
        "|---|---:|---:|---:|---:|---|---:|\n";
  for (const SoakProcess& p : r.processes) {
    const bool ok = p.warm_rss_kib > 0 && p.end_rss_kib >= 0 && p.growth_pct() < o.max_rss_growth_pct;
    absl::StrAppendFormat(&md, "| %s | %d | %.1f | %.1f | %+.2f | %s | %.1f |\n", p.name, p.pid,
                          static_cast<double>(p.warm_rss_kib) / 1024.0, static_cast<double>(p.end_rss_kib) / 1024.0,
                          p.growth_pct(), ok ? "pass" : "FAIL", static_cast<double>(p.idle_rss_kib) / 1024.0);
  }
  for (const std::string& e : r.error_samples) absl::StrAppend(&md, "\n- error: ", e);
  return md + "\n";
}

absl::Status run_soak_command(const SoakOptions& o, std::FILE* log) {
  absl::StatusOr<SoakReport> report = run_soak(o, log);
  if (!report.ok()) return report.status();
  const std::string md = soak_markdown(o, *report);
  if (log != nullptr) std::fputs(md.c_str(), log);
  if (!o.json_path.empty()) {
    if (absl::Status st = write_report_file(o.json_path, soak_json(o, *report).dump(2) + "\n"); !st.ok()) return st;
  }
  if (!o.markdown_path.empty()) {
    if (absl::Status st = write_report_file(o.markdown_path, md); !st.ok()) return st;
  }
  if (report->passed(o.max_rss_growth_pct)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "soak failed: %lld other errors, %lld of %lld KV pages free, or a process grew by %.1f%% or more",
      static_cast<long long>(report->other_errors), static_cast<long long>(report->free_kv_pages),
      static_cast<long long>(report->total_kv_pages), o.max_rss_growth_pct));
}

void add_soak_subcommand(CLI::App& app, SoakOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "soak",
      "Concurrent random streaming clients against an exl3-launch started for the run, for a fixed time; samples "
      "every process's resident memory, then checks: no unexpected errors, every KV page free, no growth after "
      "warm-up. Exits non-zero when a check fails.");
  cmd->add_option("--launch", o.launch_args, "Arguments for exl3-launch (one string; --port 0 is added)")->required();
  cmd->add_option("--launch-bin", o.launch_bin, "exl3-launch to run (default: the one beside exl3-bench)");
  cmd->add_option("--clients", o.clients, "Concurrent client loops")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--duration", o.duration_s, "Seconds of load")->check(CLI::Range(1e-3, 1e7))->capture_default_str();
  cmd->add_option("--cancel-fraction", o.cancel_fraction,
                  "Fraction of requests cut short: half cancelled after a random number of tokens, half given a "
                  "deadline of 10 ms..1 s")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--sample-interval", o.sample_interval_s, "Seconds between memory samples and progress lines")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  cmd->add_option("--max-rss-growth", o.max_rss_growth_pct, "Largest allowed RSS growth after warm-up, percent")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", o.max_new_tokens, "Upper bound of the random max_new_tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the clients' random choices")->capture_default_str();
  cmd->add_option("--request-timeout", o.request_timeout_s, "Deadline of requests not meant to be cut short, s")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  cmd->add_option("--ready-timeout", o.ready_timeout_s, "Wait for exl3-launch to serve, seconds")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write the results as JSON here");
  cmd->add_option("--markdown", o.markdown_path, "Write the markdown summary here");
  cmd->callback([&o]() {
    if (absl::Status st = run_soak_command(o, stdout); !st.ok()) {
      std::fprintf(stderr, "exl3-bench soak: error: %s\n", st.ToString().c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace exl3
