// Workers on other hosts (issue P5, acceptance 1), with the hosts built by the test: network
// namespaces joined by veth links to a bridge (netns_hosts.h), exl3-coordinator in one, an
// exl3-worker with its own copy of the model in each of two others, the test's client reaching the
// public API over its own veth. Checks:
//   - TP and layer mode across the three hosts give exactly the greedy tokens of a single-process
//     run (exl3-launch --cpu-workers 1 on loopback) for a few prompts;
//   - taking worker 1's link down at the bridge while a long stream runs (nothing tells either
//     side) ends the stream with UNAVAILABLE within 5 s, the message naming rank 1 and its address;
//   - SIGKILL of worker 1 does the same;
//   - after a loss every worker exits by itself (the survivor blocked in a collective included);
//   - a worker whose model copy differs from the coordinator's is refused, naming its rank,
//     address and the file; a process without the run's cluster secret cannot join;
//   - after every case no process is left (every child killed if needed and reaped) and the
//     namespaces and links are gone.
// Every process is given the same --cluster-secret-file, as an operator would on several hosts.
// Needs root; a machine where the namespaces cannot be made fails the test with the reason.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/launched_server.h"
#include "integration/netns_hosts.h"
#include "kernels/check.h"

namespace exl3::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kWorld = 2;
constexpr int kPublicPort = 50051;
constexpr int kControlPort = 50052;
constexpr int kMaxSeqLen = 256;
constexpr int kNewTokens = 12;

const std::vector<std::string>& prompts() {
  static const std::vector<std::string> p = {"Once upon a time", "The capital of France is", "1, 2, 3, 4,"};
  return p;
}

v1::GenerateRequest compare_request(const std::string& prompt) {
  v1::GenerateRequest r = greedy(text_request(prompt, kNewTokens));
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

double seconds_between(TestClock::time_point a, TestClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string tokens_text(const std::vector<int32_t>& t) {
  std::string s;
  for (int32_t id : t) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One child of the cluster, started through `ip netns exec NS` (which execs the program in place,
// so the pid is the program's).
struct ClusterProcess {
  std::string name;
  std::string log_path;
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;

  // Reaps the process if it exits before the deadline.
  std::optional<int> wait_exit(TestClock::time_point deadline) {
    while (pid > 0 && !reaped) {
      int s = 0;
      const pid_t r = ::waitpid(pid, &s, WNOHANG);
      if (r == pid) {
        reaped = true;
        status = s;
        break;
      }
      if ((r < 0 && errno != EINTR) || TestClock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(milliseconds(10));
    }
    if (!reaped) return std::nullopt;
    return status;
  }
  bool running() { return pid > 0 && !wait_exit(TestClock::now()).has_value(); }
  void kill_and_reap() {
    if (pid <= 0 || reaped) return;
    ::kill(pid, SIGKILL);
    wait_exit(TestClock::now() + seconds(10));
  }
};

// How a cluster is started: the sharding mode, the cluster secret every process gets, and the rank
// (if any) whose copy of the model has an edited config.json.
struct ClusterSetup {
  std::string mode = "tp";
  std::string secret_file;
  int edited_copy_rank = -1;
};

// exl3-coordinator in the coordinator namespace and one exl3-worker per worker namespace, each
// worker loading its own copy of the fixture model. The destructor SIGKILLs and reaps whatever
// still runs; everything is started from the test's main thread (PDEATHSIG follows it).
class NetnsCluster {
 public:
  static absl::StatusOr<std::unique_ptr<NetnsCluster>> start(const NetnsHosts& hosts, const ClusterSetup& setup,
                                                             const std::string& work_dir) {
    const std::string& mode = setup.mode;
    std::unique_ptr<NetnsCluster> c(new NetnsCluster());
    c->address_ = hosts.coordinator_address() + ":" + std::to_string(kPublicPort);
    const std::string bin = std::string(EXL3_BIN_DIR);
    const std::string control = hosts.coordinator_address() + ":" + std::to_string(kControlPort);
    EXL3_RETURN_IF_ERROR(c->spawn(
        "coordinator-" + mode, work_dir,
        {ip_binary(), "netns", "exec", hosts.coordinator_ns(), bin + "/exl3-coordinator", "--model",
         fixture_model_dir(), "--world", std::to_string(kWorld), "--mode", mode, "--host", hosts.coordinator_address(),
         "--port", std::to_string(kPublicPort), "--control-host", hosts.coordinator_address(), "--control-port",
         std::to_string(kControlPort), "--max-seq-len", std::to_string(kMaxSeqLen), "--max-batch", "4",
         "--cluster-secret-file", setup.secret_file}));
    for (int r = 0; r < kWorld; ++r) {
      // Each "host" has its own copy of the model, as on separate machines.
      const fs::path model = fs::path(work_dir) / ("model-w" + std::to_string(r));
      std::error_code ec;
      fs::remove_all(model, ec);
      fs::create_directories(model, ec);
      for (const auto& e : fs::directory_iterator(fixture_model_dir())) {
        fs::copy_file(e.path(), model / e.path().filename(), fs::copy_options::overwrite_existing, ec);
        if (ec) return absl::InternalError("copying the model to " + model.string() + ": " + ec.message());
      }
      if (r == setup.edited_copy_rank) std::ofstream(model / "config.json", std::ios::app) << " ";
      EXL3_RETURN_IF_ERROR(c->spawn(
          "worker" + std::to_string(r) + "-" + mode, work_dir,
          {ip_binary(), "netns", "exec", hosts.worker_ns(r), bin + "/exl3-worker", "--coordinator", control, "--rank",
           std::to_string(r), "--world", std::to_string(kWorld), "--model", model.string(), "--memory-gib", "4",
           "--connect-timeout", "60", "--cluster-secret-file", setup.secret_file}));
    }
    return c;
  }

  // A worker started in rank `rank`'s namespace without the cluster secret; returns its index in
  // process(i).
  absl::StatusOr<size_t> spawn_stray_worker(const NetnsHosts& hosts, int rank, const std::string& work_dir) {
    const std::string control = hosts.coordinator_address() + ":" + std::to_string(kControlPort);
    EXL3_RETURN_IF_ERROR(spawn("stray-worker" + std::to_string(rank), work_dir,
                               {ip_binary(), "netns", "exec", hosts.worker_ns(rank), std::string(EXL3_BIN_DIR) +
                                "/exl3-worker", "--coordinator", control, "--rank", std::to_string(rank), "--world",
                                std::to_string(kWorld), "--model", fixture_model_dir(), "--memory-gib", "4",
                                "--connect-timeout", "20"}));
    return procs_.size() - 1;
  }
  ClusterProcess& process(size_t i) { return procs_[i]; }

  ~NetnsCluster() { stop_all(); }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  const std::string& address() const { return address_; }
  ClusterProcess& coordinator() { return procs_[0]; }
  ClusterProcess& worker(int r) { return procs_[static_cast<size_t>(r) + 1]; }

  // Waits for the coordinator's "serving on" line; fails at once when a process exits first.
  absl::Status wait_serving(TestClock::time_point deadline) {
    while (true) {
      if (read_file(coordinator().log_path).find("serving on ") != std::string::npos) return absl::OkStatus();
      for (ClusterProcess& p : procs_) {
        if (!p.running()) {
          return absl::UnavailableError(p.name + " exited (" + describe_wait_status(p.status) + ") before serving");
        }
      }
      if (TestClock::now() >= deadline) return absl::DeadlineExceededError("no \"serving on\" from the coordinator");
      std::this_thread::sleep_for(milliseconds(50));
    }
  }

  void stop_all() {
    for (ClusterProcess& p : procs_) p.kill_and_reap();
  }
  std::vector<pid_t> pids() const {
    std::vector<pid_t> out;
    for (const ClusterProcess& p : procs_) out.push_back(p.pid);
    return out;
  }
  // The last bytes of every log, for failure messages.
  std::string logs(size_t bytes = 3000) const {
    std::string out;
    for (const ClusterProcess& p : procs_) {
      const std::string all = read_file(p.log_path);
      out += "--- " + p.name + " (" + p.log_path + ") ---\n" + (all.size() <= bytes ? all : all.substr(all.size() - bytes));
    }
    return out;
  }

 private:
  NetnsCluster() = default;

  absl::Status spawn(const std::string& name, const std::string& work_dir, std::vector<std::string> argv) {
    ClusterProcess p;
    p.name = name;
    p.log_path = work_dir + "/" + name + ".log";
    UniqueFd log(::open(p.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (log.get() < 0) return absl::InternalError("cannot open " + p.log_path);
    ChildLaunch launch;
    launch.argv = std::move(argv);
    launch.stdout_fd = log.get();
    launch.stderr_fd = log.get();
    absl::StatusOr<StartedChild> child = start_child(launch);
    if (!child.ok()) return child.status();
    p.pid = child->pid;
    procs_.push_back(std::move(p));
    return absl::OkStatus();
  }

  std::string address_;
  std::vector<ClusterProcess> procs_;
};

// Greedy tokens of every prompt from a single-process run (one CPU worker on loopback), made once.
const std::map<std::string, std::vector<int32_t>>& reference_tokens() {
  static std::map<std::string, std::vector<int32_t>> ref;
  if (!ref.empty()) return ref;
  LaunchConfig config;
  config.workers = 1;
  config.max_seq_len = kMaxSeqLen;
  config.max_batch = 4;
  config.log_name = "multi_host_reference";
  absl::StatusOr<std::unique_ptr<LaunchedServer>> server = LaunchedServer::start(config, seconds(60));
  if (!server.ok()) {
    ADD_FAILURE() << "single-process reference: " << server.status().message();
    return ref;
  }
  std::unique_ptr<v1::Inference::Stub> stub = (*server)->stub();
  for (const std::string& p : prompts()) {
    const StreamResult r = stream_generate(*stub, compare_request(p), seconds(60));
    if (!r.status.ok() || r.tokens.size() != static_cast<size_t>(kNewTokens)) {
      ADD_FAILURE() << "reference \"" << p << "\": " << describe(r.status) << ", " << r.tokens.size() << " tokens\n"
                    << (*server)->log_tail();
      ref.clear();
      return ref;
    }
    ref[p] = r.tokens;
  }
  (*server)->stop(seconds(20));
  return ref;
}

class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    work_dir_ = std::string(EXL3_TEST_WORK_DIR) + "/multi-host-" + std::to_string(::getpid());
    fs::create_directories(work_dir_);
    absl::StatusOr<std::unique_ptr<NetnsHosts>> hosts = NetnsHosts::create(kWorld);
    // No skip: a machine that cannot build the hosts fails with the reason.
    ASSERT_TRUE(hosts.ok()) << hosts.status().message();
    hosts_ = *std::move(hosts);
  }

  void TearDown() override {
    if (cluster_) {
      if (HasFailure()) std::fprintf(stderr, "%s\n", cluster_->logs().c_str());
      cluster_->stop_all();
      const std::vector<pid_t> pids = cluster_->pids();
      cluster_.reset();
      for (pid_t p : pids) EXPECT_TRUE(p <= 0 || process_gone(p)) << "pid " << p << " still exists: " << process_cmdline(p);
    }
    for (int r = 0; r < kWorld; ++r) fs::remove_all(fs::path(work_dir_) / ("model-w" + std::to_string(r)));
    if (hosts_) {
      hosts_.reset();
      // Every namespace and link named after this pid must be gone.
      for (const char* prefix : {"exl3c-", "exl3w0-", "exl3w1-"}) {
        const std::string ns = prefix + std::to_string(::getpid());
        EXPECT_FALSE(fs::exists("/run/netns/" + ns)) << "namespace " << ns << " left behind";
      }
      const std::string root_if = "exl3r" + std::to_string(::getpid());
      EXPECT_FALSE(fs::exists("/sys/class/net/" + root_if)) << "link " << root_if << " left behind";
    }
  }

  // Starts the cluster (every process given the same cluster secret file).
  void spawn_cluster(ClusterSetup setup) {
    setup.secret_file = work_dir_ + "/cluster-secret";
    std::ofstream(setup.secret_file, std::ios::trunc) << "netns-test-secret-" << ::getpid() << "\n";
    absl::StatusOr<std::unique_ptr<NetnsCluster>> c = NetnsCluster::start(*hosts_, setup, work_dir_);
    ASSERT_TRUE(c.ok()) << c.status().message();
    cluster_ = *std::move(c);
  }

  // Starts the cluster in `mode` and waits until it serves.
  void start_cluster(const std::string& mode) {
    ClusterSetup setup;
    setup.mode = mode;
    ASSERT_NO_FATAL_FAILURE(spawn_cluster(setup));
    const auto t0 = TestClock::now();
    const absl::Status serving = cluster_->wait_serving(t0 + seconds(90));
    ASSERT_TRUE(serving.ok()) << serving.message() << "\n" << cluster_->logs();
    std::printf("[timing] %s cluster serving on %s after %.2f s\n", mode.c_str(), cluster_->address().c_str(),
                seconds_between(t0, TestClock::now()));
  }

  std::unique_ptr<v1::Inference::Stub> stub() const {
    return v1::Inference::NewStub(grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials()));
  }

  void expect_greedy_equal(const std::string& mode) {
    const auto& ref = reference_tokens();
    ASSERT_EQ(ref.size(), prompts().size());
    ASSERT_NO_FATAL_FAILURE(start_cluster(mode));
    std::unique_ptr<v1::Inference::Stub> s = stub();
    for (const std::string& p : prompts()) {
      const StreamResult r = stream_generate(*s, compare_request(p), seconds(60));
      ASSERT_TRUE(r.status.ok()) << "\"" << p << "\": " << describe(r.status);
      const std::vector<int32_t>& want = ref.at(p);
      size_t first = 0;
      while (first < want.size() && first < r.tokens.size() && want[first] == r.tokens[first]) ++first;
      EXPECT_EQ(r.tokens, want) << mode << " across 3 hosts vs one process, \"" << p << "\": first difference at token "
                                << first << "\n  hosts:  " << tokens_text(r.tokens) << "\n  single: " << tokens_text(want);
      std::printf("[tokens] %s \"%s\": %s\n", mode.c_str(), p.c_str(), tokens_text(r.tokens).c_str());
    }
  }

  // Runs long streams one after another until one fails; `event` (taking worker 1 away) runs once
  // the first stream produces tokens. Checks the failure: UNAVAILABLE within 5 s naming rank 1
  // and its address, then the coordinator exits non-zero by itself.
  void expect_loss_detected(const std::string& what, const std::function<void()>& event) {
    ASSERT_NO_FATAL_FAILURE(start_cluster("tp"));
    std::atomic<bool> flowing{false};
    std::atomic<int> completed{0};
    StreamResult failed;
    std::thread client([&] {
      std::unique_ptr<v1::Inference::Stub> s = stub();
      for (int i = 0; i < 100; ++i) {
        v1::GenerateRequest r = greedy(text_request("Once upon a time, in a land far away,", kMaxSeqLen - 32));
        r.mutable_stopping()->set_ignore_eos(true);
        StreamResult got = stream_generate(*s, r, seconds(60), [&](const v1::GenerateResponse& m) {
          if (m.token_ids_size() > 0) flowing = true;
        });
        if (!got.status.ok()) {
          failed = std::move(got);
          return;
        }
        ++completed;
      }
    });
    const auto flow_deadline = TestClock::now() + seconds(30);
    while (!flowing && TestClock::now() < flow_deadline) std::this_thread::sleep_for(milliseconds(5));
    if (!flowing) {
      cluster_->stop_all();  // ends the client's stream now
      client.join();
      FAIL() << "no tokens within 30 s: " << describe(failed.status);
    }
    const auto event_at = TestClock::now();
    event();
    client.join();
    const double after = seconds_between(event_at, failed.finished);
    std::printf("[timing] %s: UNAVAILABLE expected; got %s %.3f s after the event (%d streams completed before, %zu "
                "tokens in the failed one): %s\n",
                what.c_str(), code_name(failed.status.error_code()).c_str(), after, completed.load(),
                failed.tokens.size(), failed.status.error_message().c_str());
    EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::UNAVAILABLE) << describe(failed.status);
    EXPECT_LT(after, 5.0) << what << ": the stream ended " << after << " s after the event";
    EXPECT_NE(failed.status.error_message().find("rank 1"), std::string::npos) << failed.status.error_message();
    EXPECT_NE(failed.status.error_message().find(hosts_->worker_address(1)), std::string::npos)
        << "the message should name worker 1's address " << hosts_->worker_address(1) << ": "
        << failed.status.error_message();
    const std::optional<int> exit = cluster_->coordinator().wait_exit(event_at + seconds(20));
    ASSERT_TRUE(exit.has_value()) << "exl3-coordinator still running 20 s after the event";
    std::printf("[timing] %s: exl3-coordinator exited %.2f s after the event (%s)\n", what.c_str(),
                seconds_between(event_at, TestClock::now()), describe_wait_status(*exit).c_str());
    EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0) << describe_wait_status(*exit);
    expect_workers_exit(what, event_at);
  }

  // Every worker exits by itself (a collective blocked on the lost peer included) within 25 s of
  // `since`: the survivor sees its coordinator go, the cut-off one its keepalive fail (5 s + 5 s).
  void expect_workers_exit(const std::string& what, TestClock::time_point since) {
    for (int r = 0; r < kWorld; ++r) {
      const std::optional<int> exit = cluster_->worker(r).wait_exit(since + seconds(25));
      EXPECT_TRUE(exit.has_value()) << what << ": worker " << r << " still running 25 s later";
      if (exit) {
        std::printf("[timing] %s: worker %d exited %.2f s after the event (%s)\n", what.c_str(), r,
                    seconds_between(since, TestClock::now()), describe_wait_status(*exit).c_str());
      }
    }
  }

  std::string work_dir_;
  std::unique_ptr<NetnsHosts> hosts_;
  std::unique_ptr<NetnsCluster> cluster_;
};

TEST_F(MultiHost, TensorParallelAcrossThreeHostsMatchesOneProcess) { expect_greedy_equal("tp"); }

TEST_F(MultiHost, LayerSplitAcrossThreeHostsMatchesOneProcess) { expect_greedy_equal("layers"); }

TEST_F(MultiHost, WorkerLinkDownFailsStreamsWithin5s) {
  expect_loss_detected("link down", [&] {
    const absl::Status s = hosts_->set_worker_link(1, false);
    EXPECT_TRUE(s.ok()) << s.message();
  });
}

TEST_F(MultiHost, KilledWorkerHostFailsStreamsWithin5s) {
  expect_loss_detected("worker killed", [&] {
    EXPECT_NE(process_cmdline(cluster_->worker(1).pid).find("exl3-worker"), std::string::npos)
        << "pid " << cluster_->worker(1).pid << " is not the worker: " << process_cmdline(cluster_->worker(1).pid);
    EXPECT_EQ(::kill(cluster_->worker(1).pid, SIGKILL), 0);
  });
}

TEST_F(MultiHost, WorkerWithAnotherModelCopyIsRefusedByName) {
  ClusterSetup setup;
  setup.edited_copy_rank = 1;
  ASSERT_NO_FATAL_FAILURE(spawn_cluster(setup));
  const auto t0 = TestClock::now();
  const std::optional<int> exit = cluster_->coordinator().wait_exit(t0 + seconds(90));
  ASSERT_TRUE(exit.has_value()) << "exl3-coordinator still running 90 s after start\n" << cluster_->logs();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0) << describe_wait_status(*exit);
  const std::string log = read_file(cluster_->coordinator().log_path);
  EXPECT_NE(log.find("worker rank 1 on "), std::string::npos) << log;
  EXPECT_NE(log.find(hosts_->worker_address(1)), std::string::npos) << "worker 1's address should be named\n" << log;
  EXPECT_NE(log.find("differs from the coordinator's: file config.json"), std::string::npos) << log;
  EXPECT_EQ(log.find("serving on "), std::string::npos) << "the coordinator served with a mismatched copy\n" << log;
  expect_workers_exit("model copy refused", TestClock::now());
}

TEST_F(MultiHost, ProcessWithoutTheClusterSecretCannotJoin) {
  ASSERT_NO_FATAL_FAILURE(start_cluster("tp"));
  absl::StatusOr<size_t> stray = cluster_->spawn_stray_worker(*hosts_, 1, work_dir_);
  ASSERT_TRUE(stray.ok()) << stray.status().message();
  ClusterProcess& p = cluster_->process(*stray);
  const std::optional<int> exit = p.wait_exit(TestClock::now() + seconds(30));
  ASSERT_TRUE(exit.has_value()) << "the worker without the secret still runs 30 s later";
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0) << describe_wait_status(*exit);
  const std::string log = read_file(p.log_path);
  EXPECT_NE(log.find("cluster secret missing"), std::string::npos) << log;
  EXPECT_NE(log.find("--cluster-secret-file"), std::string::npos) << log;
  // The group is untouched: it still serves the same greedy tokens.
  const auto& ref = reference_tokens();
  ASSERT_FALSE(ref.empty());
  std::unique_ptr<v1::Inference::Stub> s = stub();
  const StreamResult r = stream_generate(*s, compare_request(prompts()[0]), seconds(60));
  ASSERT_TRUE(r.status.ok()) << describe(r.status);
  EXPECT_EQ(r.tokens, ref.at(prompts()[0]));
}

}  // namespace
}  // namespace exl3::testing
