// Three "hosts" on one machine for the multi-host tests: a coordinator network namespace holding
// a bridge, and one namespace per worker joined to it by a veth pair, each with loopback up and a
// private address of 10.213.X.0/24 (X from the pid, skipping subnets in use). The test process
// itself gets a veth into the bridge too (address .2), so its gRPC channels reach the
// coordinator's public API without entering a namespace. Names carry the test's pid (exl3c-PID,
// exl3wR-PID, exl3rPID) so parallel runs never meet; the destructor removes everything, and
// create() first removes leftovers of a crashed run with the same names. Needs root
// (CAP_NET_ADMIN) and iproute2; every `ip` call runs through run_command (start_child,
// PDEATHSIG, bounded wait). Header-only (see launched_server.h).
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "integration/run_command.h"

namespace exl3::testing {

// The iproute2 binary (start_child needs a path).
inline std::string ip_binary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "/usr/sbin/ip";
}

// Runs `ip ARGS...`; an error carries the command and its output.
inline absl::Status run_ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ip_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = run_command(argv, std::chrono::seconds(20), "netns-ip");
  if (r.exited_with(0)) return absl::OkStatus();
  std::string cmd;
  for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return absl::FailedPreconditionError(cmd + ": " + r.describe());
}

class NetnsHosts {
 public:
  static constexpr char kBridge[] = "br0";
  static constexpr char kWorkerIf[] = "eth0";  // the worker's end, inside its namespace

  static absl::StatusOr<std::unique_ptr<NetnsHosts>> create(int workers) {
    std::unique_ptr<NetnsHosts> h(new NetnsHosts(workers));
    h->remove_all();  // leftovers of an earlier run with this pid
    h->created_ = true;
    const std::string& c = h->coordinator_ns_;
    std::vector<std::vector<std::string>> steps;
    steps.push_back({"netns", "add", c});
    for (const std::string& w : h->worker_ns_) steps.push_back({"netns", "add", w});
    steps.push_back({"-n", c, "link", "set", "lo", "up"});
    for (const std::string& w : h->worker_ns_) steps.push_back({"-n", w, "link", "set", "lo", "up"});
    steps.push_back({"-n", c, "link", "add", kBridge, "type", "bridge"});
    steps.push_back({"-n", c, "addr", "add", h->coordinator_address_ + "/24", "dev", kBridge});
    steps.push_back({"-n", c, "link", "set", kBridge, "up"});
    for (int r = 0; r < workers; ++r) {
      const std::string& w = h->worker_ns_[static_cast<size_t>(r)];
      const std::string port = h->bridge_port(r);
      steps.push_back({"-n", c, "link", "add", port, "type", "veth", "peer", "name", kWorkerIf, "netns", w});
      steps.push_back({"-n", c, "link", "set", port, "master", kBridge});
      steps.push_back({"-n", c, "link", "set", port, "up"});
      steps.push_back({"-n", w, "addr", "add", h->worker_address_[static_cast<size_t>(r)] + "/24", "dev", kWorkerIf});
      steps.push_back({"-n", w, "link", "set", kWorkerIf, "up"});
    }
    // The test process's own link into the bridge.
    steps.push_back({"link", "add", h->root_if_, "type", "veth", "peer", "name", "vroot", "netns", c});
    steps.push_back({"-n", c, "link", "set", "vroot", "master", kBridge});
    steps.push_back({"-n", c, "link", "set", "vroot", "up"});
    steps.push_back({"addr", "add", h->root_address_ + "/24", "dev", h->root_if_});
    steps.push_back({"link", "set", h->root_if_, "up"});
    for (const auto& s : steps) {
      if (absl::Status st = run_ip(s); !st.ok()) {
        return absl::FailedPreconditionError("cannot build the network namespaces (the test needs root and "
                                             "iproute2 with veth and bridge support): " +
                                             std::string(st.message()));
      }
    }
    return h;
  }

  ~NetnsHosts() {
    if (created_) remove_all();
  }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  const std::string& coordinator_ns() const { return coordinator_ns_; }
  const std::string& worker_ns(int r) const { return worker_ns_[static_cast<size_t>(r)]; }
  const std::string& coordinator_address() const { return coordinator_address_; }
  const std::string& worker_address(int r) const { return worker_address_[static_cast<size_t>(r)]; }
  // Worker r's veth end on the bridge (in the coordinator namespace).
  std::string bridge_port(int r) const { return "vw" + std::to_string(r); }

  // Takes worker r's link down (or up) at the bridge: from then on nothing reaches either side,
  // and neither side's sockets are told.
  absl::Status set_worker_link(int r, bool up) {
    return run_ip({"-n", coordinator_ns_, "link", "set", bridge_port(r), up ? "up" : "down"});
  }

  // The names of this instance's namespaces that still exist (/run/netns).
  std::vector<std::string> existing_namespaces() const {
    std::vector<std::string> out;
    for (const std::string& n : all_namespaces()) {
      if (std::filesystem::exists("/run/netns/" + n)) out.push_back(n);
    }
    return out;
  }
  bool root_link_exists() const { return std::filesystem::exists("/sys/class/net/" + root_if_); }

  // Removes the root veth (its peer goes with it) and every namespace (their veths go with them).
  // Errors are ignored: most of it may not exist.
  void remove_all() {
    if (root_link_exists()) (void)run_ip({"link", "del", root_if_});
    for (const std::string& n : all_namespaces()) {
      if (std::filesystem::exists("/run/netns/" + n)) (void)run_ip({"netns", "del", n});
    }
  }

 private:
  // The third octet of the test's /24: from the pid, skipping subnets of 10.213/16 that an
  // interface of this namespace already uses (another run of the test at the same time).
  static int free_subnet() {
    const CommandResult r = run_command({ip_binary(), "-4", "-o", "addr", "show"}, std::chrono::seconds(20), "netns-ip");
    for (int k = 0; k < 250; ++k) {
      const int octet = (::getpid() + k) % 250;
      if (r.output.find("10.213." + std::to_string(octet) + ".") == std::string::npos) return octet;
    }
    return ::getpid() % 250;
  }

  explicit NetnsHosts(int workers) {
    const std::string pid = std::to_string(::getpid());
    const std::string net = "10.213." + std::to_string(free_subnet()) + ".";
    coordinator_ns_ = "exl3c-" + pid;
    coordinator_address_ = net + "1";
    root_address_ = net + "2";
    root_if_ = "exl3r" + pid;
    for (int r = 0; r < workers; ++r) {
      worker_ns_.push_back("exl3w" + std::to_string(r) + "-" + pid);
      worker_address_.push_back(net + std::to_string(10 + r));
    }
  }

  std::vector<std::string> all_namespaces() const {
    std::vector<std::string> out = {coordinator_ns_};
    out.insert(out.end(), worker_ns_.begin(), worker_ns_.end());
    return out;
  }

  bool created_ = false;
  std::string coordinator_ns_, coordinator_address_, root_address_, root_if_;
  std::vector<std::string> worker_ns_, worker_address_;
};

}  // namespace exl3::testing
