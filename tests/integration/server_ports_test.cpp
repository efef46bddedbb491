// Ports of a launched server: the public API listens on 127.0.0.1 only by default (every listener
// on its port in /proc/net/tcp and tcp6 is 127.0.0.1 or ::ffff:127.0.0.1); a second exl3-launch (or exl3-coordinator) asked for the port of the
// running one, as public API or control plane, or for a port a plain socket holds, exits non-zero
// naming HOST:PORT, and the first server keeps serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/run_command.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

class ServerPorts : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.max_batch = 4;
    config.log_name = "server_ports";
    start_server(config);
  }

  static int port() {
    const std::string& a = server().address();
    int p = 0;
    EXPECT_TRUE(absl::SimpleAtoi(a.substr(a.rfind(':') + 1), &p)) << a;
    return p;
  }

  static std::vector<std::string> launch_argv(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {std::string(EXL3_BIN_DIR) + "/exl3-launch", "--model", fixture_model_dir(),
                                     "--cpu-workers", "1", "--max-seq-len", "256"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }

  // The first server still answers health and completes a small greedy request.
  void expect_first_still_serving() {
    EXPECT_FALSE(server().wait_exit(TestClock::now()).has_value()) << "the first exl3-launch exited";
    HealthStatus health = HealthResponse::UNKNOWN;
    const grpc::Status checked = health_check(server().channel(), &health);
    EXPECT_TRUE(checked.ok()) << describe(checked);
    EXPECT_EQ(health, HealthResponse::SERVING);
    const StreamResult r = stream_generate(*server().stub(), greedy(text_request("Hello there", 4)), seconds(30));
    EXPECT_TRUE(r.status.ok()) << describe(r.status);
  }
};

// Local addresses (hex, as the kernel prints them) of the TCP sockets listening on `port`.
std::vector<std::string> listening_addresses(const char* table, int port) {
  std::ifstream in(table);
  std::vector<std::string> out;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const size_t colon = local.rfind(':');
    if (state != "0A" || colon == std::string::npos) continue;  // 0A = LISTEN
    if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) out.push_back(local.substr(0, colon));
  }
  return out;
}

TEST_F(ServerPorts, PublicApiListensOnLoopbackOnly) {
  // gRPC may listen on an IPv6 socket bound to the IPv4-mapped ::ffff:127.0.0.1 instead.
  std::vector<std::string> all = listening_addresses("/proc/net/tcp", port());
  for (const std::string& a : listening_addresses("/proc/net/tcp6", port())) all.push_back(a);
  ASSERT_FALSE(all.empty()) << "no listener on port " << port() << " in /proc/net/tcp or tcp6";
  for (const std::string& a : all) {
    EXPECT_TRUE(a == "0100007F" || a == "0000000000000000FFFF00000100007F")
        << "the public API listens on " << a << " (hex, as in /proc/net/tcp*), not only on 127.0.0.1";
  }
  // The help says so too.
  const CommandResult help = run_command({std::string(EXL3_BIN_DIR) + "/exl3-launch", "--help"}, seconds(10), "help");
  EXPECT_TRUE(help.exited_with(0)) << help.describe();
  EXPECT_NE(help.output.find("127.0.0.1: this machine only"), std::string::npos) << help.output;
}

TEST_F(ServerPorts, SecondLauncherOnThePublicPortExitsNamingIt) {
  const std::string port_text = std::to_string(port());
  const CommandResult second = run_command(launch_argv({"--port", port_text}), seconds(60), "second_public");
  EXPECT_TRUE(second.failed()) << second.describe();
  EXPECT_NE(second.output.find("127.0.0.1:" + port_text + " (public API, --port) is already in use"),
            std::string::npos)
      << second.describe();
  EXPECT_EQ(second.output.find("serving on"), std::string::npos) << second.describe();
  expect_first_still_serving();
}

TEST_F(ServerPorts, SecondLauncherOnTheControlPortExitsNamingIt) {
  const std::string port_text = std::to_string(port());
  const CommandResult second =
      run_command(launch_argv({"--port", "0", "--control-port", port_text}), seconds(60), "second_control");
  EXPECT_TRUE(second.failed()) << second.describe();
  EXPECT_NE(second.output.find("127.0.0.1:" + port_text + " (control plane, --control-port) is already in use"),
            std::string::npos)
      << second.describe();
  expect_first_still_serving();
}

TEST_F(ServerPorts, CoordinatorOnThePublicPortExitsNamingIt) {
  const std::string port_text = std::to_string(port());
  const CommandResult second = run_command({std::string(EXL3_BIN_DIR) + "/exl3-coordinator", "--model",
                                            fixture_model_dir(), "--world", "1", "--port", port_text},
                                           seconds(60), "second_coordinator");
  EXPECT_TRUE(second.failed()) << second.describe();
  EXPECT_NE(second.output.find("127.0.0.1:" + port_text + " (public API, --port)"), std::string::npos)
      << second.describe();
  expect_first_still_serving();
}

TEST_F(ServerPorts, PortHeldByAnotherProgramIsRefused) {
  // A plain listening socket, as any other program would hold it.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port_text = std::to_string(ntohs(addr.sin_port));
  const CommandResult second = run_command(launch_argv({"--port", port_text}), seconds(60), "held_port");
  ::close(fd);
  EXPECT_TRUE(second.failed()) << second.describe();
  EXPECT_NE(second.output.find("127.0.0.1:" + port_text), std::string::npos) << second.describe();
}

}  // namespace
}  // namespace exl3::testing
