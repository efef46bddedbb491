// exl3-bench serve: concurrent streaming clients of the public API (see serve_bench.h).
#include "bench/serve_bench.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_report.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "launch/process/child_process.h"
#include "launch/process/fd_util.h"
#include "launch/process/unique_fd.h"
#include "proto/inference.grpc.pb.h"

namespace exl3 {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One benchmark request: greedy, ignore_eos, exactly max_new_tokens, a fixed prompt per client.
v1::GenerateRequest bench_request(const ServeBenchOptions& o, int32_t vocab, int client, int max_new_tokens) {
  v1::GenerateRequest req;
  req.set_request_id(absl::StrCat("bench-", client));
  v1::TokenIds* ids = req.mutable_prompt_tokens();
  const int32_t span = std::max<int32_t>(1, std::min<int32_t>(vocab - 1, 200));
  for (int i = 0; i < o.prompt_tokens; ++i) ids->add_ids(1 + (i * 37 + (client + 1) * 11) % span);
  req.set_add_bos(false);
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_stopping()->set_max_new_tokens(max_new_tokens);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

// client: the measured client's index, or -1 for the warm-up request.
StreamResult stream_one(v1::Inference::Stub& stub, const ServeBenchOptions& o, int32_t vocab, int client,
                        int max_new_tokens) {
  return stream_generate(
      stub, bench_request(o, vocab, client, max_new_tokens), o.request_timeout_s, -1,
      client < 0 ? std::string("Generate (warm-up request)") : absl::StrCat("Generate (client ", client, ")"));
}

absl::StatusOr<ServeRound> run_round(const std::string& address, const ServeBenchOptions& o, int32_t vocab,
                                     int clients) {
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs;
  for (int c = 0; c < clients; ++c) {
    stubs.push_back(v1::Inference::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  }
  std::vector<StreamResult> results(static_cast<size_t>(clients));
  const bool extra = o.stop_strings > 0;
  std::barrier sync(clients + 1 + (extra ? 1 : 0));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c]() {
      sync.arrive_and_wait();
      results[static_cast<size_t>(c)] = stream_one(*stubs[static_cast<size_t>(c)], o, vocab, c, o.max_new_tokens);
    });
  }
  // The unmeasured client: back-to-back requests carrying the stop set until the measured ones end.
  std::atomic<bool> measured_done{false};
  ServeRound round;
  absl::Status extra_status;
  std::thread extra_thread;
  if (extra) {
    extra_thread = std::thread([&]() {
      std::unique_ptr<v1::Inference::Stub> stub =
          v1::Inference::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      v1::GenerateRequest req = bench_request(o, vocab, clients, o.max_new_tokens);
      for (std::string& s : unmatched_stop_strings(o.stop_strings, o.stop_string_bytes)) {
        req.mutable_stopping()->add_stop_strings(std::move(s));
      }
      sync.arrive_and_wait();
      while (!measured_done.load()) {
        StreamResult r = stream_generate(*stub, req, o.request_timeout_s, -1, "Generate (stop-string client)");
        if (!r.status.ok()) {
          extra_status = r.status;
          return;
        }
        ++round.extra_requests;
        round.extra_tokens += r.tokens;
      }
    });
  }
  const Clock::time_point start = Clock::now();
  sync.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  measured_done.store(true);
  if (extra_thread.joinable()) extra_thread.join();
  if (!extra_status.ok()) return extra_status;
  round.clients = clients;
  Clock::time_point end = start;
  for (const StreamResult& r : results) {
    if (!r.status.ok()) return r.status;
    round.total_tokens += r.tokens;
    round.ttft_s.push_back(r.ttft_s);
    round.itl_s.insert(round.itl_s.end(), r.itl_s.begin(), r.itl_s.end());
    end = std::max(end, r.end);
  }
  round.wall_s = seconds_between(start, end);
  return round;
}

absl::Status validate(const ServeBenchOptions& o) {
  if (o.server.empty() == o.launch_args.empty()) {
    return absl::InvalidArgumentError("give exactly one of --server HOST:PORT and --launch \"ARGS\"");
  }
  if (o.clients.empty()) return absl::InvalidArgumentError("--clients needs at least one count");
  for (int c : o.clients) {
    if (c < 1 || c > 4096) return absl::InvalidArgumentError(absl::StrCat("--clients: ", c, " is outside 1..4096"));
  }
  if (o.max_new_tokens < 1) return absl::InvalidArgumentError("--max-new-tokens must be at least 1");
  if (o.prompt_tokens < 1) return absl::InvalidArgumentError("--prompt-tokens must be at least 1");
  if (o.stop_strings < 0 || o.stop_string_bytes < 1) {
    return absl::InvalidArgumentError("--stop-strings must be >= 0 and --stop-string-bytes >= 1");
  }
  return absl::OkStatus();
}

nlohmann::json latency_json(const std::vector<double>& v) {
  double mean = 0.0;
  for (double x : v) mean += x;
  if (!v.empty()) mean /= static_cast<double>(v.size());
  return {{"p50", percentile(v, 50.0)}, {"p99", percentile(v, 99.0)}, {"mean", mean}, {"count", v.size()}};
}

}  // namespace

LaunchedServer::~LaunchedServer() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    wait_exit(Clock::now() + std::chrono::seconds(10));
  }
}

absl::StatusOr<std::unique_ptr<LaunchedServer>> LaunchedServer::start(const std::string& launch_bin,
                                                                      const std::string& args,
                                                                      double ready_timeout_s) {
  std::string bin = launch_bin;
  if (bin.empty()) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return absl::InternalError("cannot find this program's directory (/proc/self/exe)");
    bin = (self.parent_path() / "exl3-launch").string();
  }
  if (!std::filesystem::exists(bin)) {
    return absl::NotFoundError(absl::StrCat("exl3-launch not found at ", bin, " (use --launch-bin)"));
  }
  ChildLaunch launch;
  launch.argv = {bin};
  for (absl::string_view arg : absl::StrSplit(args, ' ', absl::SkipWhitespace())) launch.argv.emplace_back(arg);
  launch.argv.push_back("--port");
  launch.argv.push_back("0");
  absl::StatusOr<Pipe> out = make_pipe();
  if (!out.ok()) return out.status();
  launch.stdout_fd = out->write.get();
  absl::StatusOr<StartedChild> child = start_child(launch);
  if (!child.ok()) return child.status();
  std::unique_ptr<LaunchedServer> server(new LaunchedServer());
  server->pid_ = child->pid;
  server->stdout_ = std::move(out->read);
  out->write.reset();
  absl::StatusOr<std::string> address = server->serving_address(
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ready_timeout_s)));
  if (!address.ok()) return address.status();
  server->address_ = *address;
  return server;
}

absl::Status LaunchedServer::stop(double timeout_s) {
  if (pid_ <= 0 || reaped_) return absl::OkStatus();
  ::kill(pid_, SIGTERM);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  if (wait_exit(deadline)) return absl::OkStatus();
  ::kill(pid_, SIGKILL);
  wait_exit(Clock::now() + std::chrono::seconds(10));
  return absl::DeadlineExceededError(
      absl::StrFormat("exl3-launch did not exit within %.0f s of SIGTERM (killed)", timeout_s));
}

bool LaunchedServer::wait_exit(Clock::time_point deadline) {
  while (!reaped_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (r < 0 && errno != EINTR) return false;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Reads stdout lines until "serving on HOST:PORT"; a 0.0.0.0 / [::] host becomes 127.0.0.1.
absl::StatusOr<std::string> LaunchedServer::serving_address(Clock::time_point deadline) {
  static constexpr char kPrefix[] = "serving on ";
  std::string buffer;
  while (true) {
    size_t eol;
    while ((eol = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, eol);
      buffer.erase(0, eol + 1);
      if (line.rfind(kPrefix, 0) != 0) continue;
      const std::string hostport = line.substr(sizeof(kPrefix) - 1);
      const size_t colon = hostport.rfind(':');
      int port = 0;
      if (colon == std::string::npos || !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port <= 0) {
        return absl::InternalError(absl::StrCat("exl3-launch printed an unreadable line: ", line));
      }
      std::string host = hostport.substr(0, colon);
      if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = "127.0.0.1";
      return absl::StrCat(host, ":", port);
    }
    pollfd fd{stdout_.get(), POLLIN, 0};
    absl::StatusOr<int> ready = poll_until(std::span<pollfd>(&fd, 1), deadline);
    if (!ready.ok()) return ready.status();
    if (*ready == 0) return absl::DeadlineExceededError("exl3-launch printed no 'serving on' line in time");
    std::array<char, 4096> chunk;
    const ssize_t n = ::read(stdout_.get(), chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("exl3-launch exited before serving (see its messages above)");
    buffer.append(chunk.data(), static_cast<size_t>(n));
  }
}

absl::Status from_grpc(const grpc::Status& st, absl::string_view what) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), absl::StrCat(what, ": ", st.error_message()));
}

StreamResult stream_generate(v1::Inference::Stub& stub, const v1::GenerateRequest& req, double timeout_s,
                             int64_t cancel_after_tokens, absl::string_view what) {
  StreamResult r;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                          std::chrono::duration<double>(timeout_s)));
  const Clock::time_point start = Clock::now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&ctx, req);
  if (cancel_after_tokens == 0) ctx.TryCancel();
  v1::GenerateResponse resp;
  Clock::time_point previous = start;
  while (reader->Read(&resp)) {
    const int k = resp.token_ids_size();
    if (k == 0) continue;
    const Clock::time_point now = Clock::now();
    int first = 0;
    if (r.tokens == 0) {
      r.ttft_s = seconds_between(start, now);
      for (int i = 1; i < k; ++i) r.itl_s.push_back(0.0);
      first = k;
    }
    for (int i = first; i < k; ++i) r.itl_s.push_back(seconds_between(previous, now) / k);
    r.tokens += k;
    previous = now;
    if (cancel_after_tokens > 0 && r.tokens >= cancel_after_tokens) ctx.TryCancel();
  }
  r.status = from_grpc(reader->Finish(), what);
  r.end = Clock::now();
  return r;
}

std::vector<std::string> unmatched_stop_strings(int count, int bytes) {
  std::vector<std::string> out;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < count; ++i) {
    std::string s;
    for (int b = 0; b < bytes; ++b) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      s.push_back(static_cast<char>(1 + (state >> 61)));
    }
    out.push_back(std::move(s));
  }
  return out;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size()));
  const size_t index = static_cast<size_t>(std::max(rank, 1.0)) - 1;
  return values[std::min(index, values.size() - 1)];
}

absl::StatusOr<ServeBenchReport> run_serve_bench(const ServeBenchOptions& o) {
  if (absl::Status st = validate(o); !st.ok()) return st;
  ServeBenchReport report;
  std::unique_ptr<LaunchedServer> launched;
  if (!o.launch_args.empty()) {
    absl::StatusOr<std::unique_ptr<LaunchedServer>> s =
        LaunchedServer::start(o.launch_bin, o.launch_args, o.ready_timeout_s);
    if (!s.ok()) return s.status();
    launched = std::move(*s);
    report.address = launched->address();
    report.launched = true;
  } else {
    report.address = o.server;
  }

  absl::Status failure = [&]() -> absl::Status {
    std::unique_ptr<v1::Inference::Stub> stub =
        v1::Inference::NewStub(grpc::CreateChannel(report.address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ModelInfoResponse info;
    if (absl::Status st = from_grpc(stub->ModelInfo(&ctx, v1::ModelInfoRequest(), &info),
                                    absl::StrCat("ModelInfo at ", report.address));
        !st.ok()) {
      return st;
    }
    // One short request first, so the rounds do not time the first call's set-up.
    StreamResult warm = stream_one(*stub, o, info.vocab_size(), -1, std::min(o.max_new_tokens, 2));
    if (!warm.status.ok()) return warm.status;
    for (int clients : o.clients) {
      absl::StatusOr<ServeRound> round = run_round(report.address, o, info.vocab_size(), clients);
      if (!round.ok()) return round.status();
      report.rounds.push_back(std::move(*round));
    }
    return absl::OkStatus();
  }();
  if (launched) {
    absl::Status stopped = launched->stop(o.stop_timeout_s);
    if (failure.ok()) failure = stopped;
  }
  if (!failure.ok()) return failure;
  return report;
}

nlohmann::json serve_bench_json(const ServeBenchOptions& o, const ServeBenchReport& r) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const ServeRound& round : r.rounds) {
    rounds.push_back({{"clients", round.clients},
                      {"total_tokens", round.total_tokens},
                      {"wall_s", round.wall_s},
                      {"tokens_per_s", round.tokens_per_s()},
                      {"ttft_s", latency_json(round.ttft_s)},
                      {"itl_s", latency_json(round.itl_s)},
                      {"stop_string_client", {{"requests", round.extra_requests}, {"tokens", round.extra_tokens}}}});
  }
  return {{"mode", "serve"},
          {"environment", capture_environment("client", 0, o.argv)},
          {"server", r.address},
          {"launched", r.launched},
          {"launch_args", o.launch_args},
          {"prompt_tokens", o.prompt_tokens},
          {"max_new_tokens", o.max_new_tokens},
          {"stop_string_client",
           {{"enabled", o.stop_strings > 0},
            {"stop_strings", o.stop_strings},
            {"stop_string_bytes", o.stop_strings > 0 ? o.stop_string_bytes : 0},
            {"total_bytes", static_cast<int64_t>(o.stop_strings) * (o.stop_strings > 0 ? o.stop_string_bytes : 0)}}},
          {"rounds", rounds}};
}

std::string serve_bench_markdown(const ServeBenchOptions& o, const ServeBenchReport& r) {
  std::string md = absl::StrFormat(
      "### exl3-bench serve: %s%s\n\n%d prompt tokens, %d new tokens per request (greedy, ignore_eos).\n\n", r.address,
      r.launched ? absl::StrCat(" (exl3-launch ", o.launch_args, ")") : "", o.prompt_tokens, o.max_new_tokens);
  if (o.stop_strings > 0) {
    int64_t extra_requests = 0;
    for (const ServeRound& round : r.rounds) extra_requests += round.extra_requests;
    absl::StrAppendFormat(&md,
                          "Beside the measured clients, one unmeasured client streamed %lld requests (same prompt, "
                          "greedy, ignore_eos) with %d stop strings of %d bytes each (%lld bytes, never matched).\n\n",
                          static_cast<long long>(extra_requests), o.stop_strings, o.stop_string_bytes,
                          static_cast<long long>(o.stop_strings) * o.stop_string_bytes);
  }
  md += "| clients | tokens | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |\n";
  md += "|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const ServeRound& round : r.rounds) {
    absl::StrAppendFormat(&md, "| %d | %lld | %.1f | %.1f | %.1f | %.2f | %.2f |\n", round.clients,
                          static_cast<long long>(round.total_tokens), round.tokens_per_s(),
                          1e3 * percentile(round.ttft_s, 50), 1e3 * percentile(round.ttft_s, 99),
                          1e3 * percentile(round.itl_s, 50), 1e3 * percentile(round.itl_s, 99));
  }
  return md;
}

absl::Status run_serve_bench_command(const ServeBenchOptions& o, std::FILE* log) {
  absl::StatusOr<ServeBenchReport> report = run_serve_bench(o);
  if (!report.ok()) return report.status();
  const std::string md = serve_bench_markdown(o, *report);
  if (log != nullptr) std::fputs(md.c_str(), log);
  if (!o.json_path.empty()) {
    if (absl::Status st = write_report_file(o.json_path, serve_bench_json(o, *report).dump(2) + "\n"); !st.ok()) {
      return st;
    }
  }
  if (!o.markdown_path.empty()) return write_report_file(o.markdown_path, md);
  return absl::OkStatus();
}

void add_serve_subcommand(CLI::App& app, ServeBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "N concurrent clients streaming Generate (greedy, ignore_eos) through the public API of a running server or "
      "of an exl3-launch started for the run; TTFT and inter-token latency percentiles and tokens/s per client count.");
  CLI::Option* server = cmd->add_option("--server", o.server, "HOST:PORT of a running server");
  CLI::Option* launch = cmd->add_option(
      "--launch", o.launch_args,
      "Arguments for exl3-launch (one string; --port 0 is added), started for the run and stopped with SIGTERM");
  server->excludes(launch);
  cmd->add_option("--launch-bin", o.launch_bin, "exl3-launch to run (default: the one beside exl3-bench)");
  cmd->add_option("--clients", o.clients, "Concurrent client counts, comma-separated (one round each)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", o.max_new_tokens, "Tokens each request generates")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", o.prompt_tokens, "Prompt length in tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--request-timeout", o.request_timeout_s, "Deadline of each request, seconds")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  cmd->add_option("--ready-timeout", o.ready_timeout_s, "Wait for exl3-launch to serve, seconds")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  cmd->add_option("--stop-strings", o.stop_strings,
                  "Run one extra, unmeasured client beside the measured ones whose requests carry this many stop "
                  "strings that never match (0: no extra client)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--stop-string-bytes", o.stop_string_bytes, "Bytes of each of the extra client's stop strings")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write the results as JSON here");
  cmd->add_option("--markdown", o.markdown_path, "Write the markdown table here");
  cmd->callback([&o]() {
    if (o.server.empty() && o.launch_args.empty()) {
      throw CLI::ValidationError("serve", "give one of --server HOST:PORT and --launch \"ARGS\"");
    }
    if (absl::Status st = run_serve_bench_command(o, stdout); !st.ok()) {
      std::fprintf(stderr, "exl3-bench serve: error: %s\n", st.ToString().c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace exl3
