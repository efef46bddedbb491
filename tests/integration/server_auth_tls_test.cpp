// Authentication and TLS of the public API. One launched server with --tls-cert/--tls-key (the test
// certificates of tests/data/tls) and --auth-token-file: a TLS client trusting the test CA with
// the right token gets every exl3.v1 call through; without a token, with a wrong one or a wrong
// scheme every call is UNAUTHENTICATED (the token never echoed); the health service answers without
// a token; a plain client, or a TLS client that does not trust the test CA, fails with UNAVAILABLE.
// exl3-client does the same with --tls-ca and --auth-token-file. A second server, plain TCP with a
// token, shows auth without TLS. Token and key files that are empty, missing or not PEM stop
// exl3-launch and exl3-coordinator at start-up, naming the flag and the file.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/run_command.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

constexpr char kToken[] = "s3cret-Token_0123456789";

std::string tls_file(const std::string& name) { return std::string(EXL3_TEST_DATA_DIR) + "/tls/" + name; }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string token_file() {
  static const std::string path = write_work_file("auth_token", std::string(kToken) + "\n");
  return path;
}

std::shared_ptr<grpc::Channel> tls_channel(const std::string& address, const std::string& roots_pem) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = roots_pem;
  return grpc::CreateChannel(address, grpc::SslCredentials(options));
}

// Every exl3.v1 call once with `authorization` metadata (none when empty); their statuses in the
// order Generate, GenerateUnary, Tokenize, Detokenize, ModelInfo, Stats.
std::vector<grpc::Status> call_everything(const std::shared_ptr<grpc::Channel>& channel,
                                          const std::string& authorization) {
  auto stub = v1::Inference::NewStub(channel);
  std::vector<grpc::Status> out;
  auto context = [&](grpc::ClientContext& c) {
    set_timeout(c, seconds(20));
    if (!authorization.empty()) c.AddMetadata("authorization", authorization);
  };
  {
    grpc::ClientContext c;
    context(c);
    auto reader = stub->Generate(&c, greedy(text_request("Hello there", 4)));
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    out.push_back(reader->Finish());
  }
  {
    grpc::ClientContext c;
    context(c);
    v1::GenerateResponse r;
    out.push_back(stub->GenerateUnary(&c, greedy(text_request("Hello there", 4)), &r));
  }
  {
    grpc::ClientContext c;
    context(c);
    v1::TokenizeRequest q;
    q.set_text("Hello");
    v1::TokenizeResponse r;
    out.push_back(stub->Tokenize(&c, q, &r));
  }
  {
    grpc::ClientContext c;
    context(c);
    v1::DetokenizeRequest q;
    q.add_ids(34);
    v1::DetokenizeResponse r;
    out.push_back(stub->Detokenize(&c, q, &r));
  }
  {
    grpc::ClientContext c;
    context(c);
    v1::ModelInfoResponse r;
    out.push_back(stub->ModelInfo(&c, v1::ModelInfoRequest(), &r));
  }
  {
    grpc::ClientContext c;
    context(c);
    v1::StatsResponse r;
    out.push_back(stub->Stats(&c, v1::StatsRequest(), &r));
  }
  return out;
}

void expect_all(const std::vector<grpc::Status>& statuses, grpc::StatusCode code, const std::string& what) {
  static const char* kNames[] = {"Generate", "GenerateUnary", "Tokenize", "Detokenize", "ModelInfo", "Stats"};
  ASSERT_EQ(statuses.size(), 6u);
  for (size_t i = 0; i < statuses.size(); ++i) {
    EXPECT_EQ(statuses[i].error_code(), code) << what << ": " << kNames[i] << ": " << describe(statuses[i]);
    EXPECT_EQ(statuses[i].error_message().find(kToken), std::string::npos) << "the token leaked in an error";
  }
}

class ServerAuthTls : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.max_batch = 4;
    config.log_name = "server_auth_tls";
    config.extra_args = {"--tls-cert", tls_file("server.pem"), "--tls-key", tls_file("server.key"),
                         "--auth-token-file", token_file()};
    start_server(config);
  }

  std::shared_ptr<grpc::Channel> trusted() const { return tls_channel(server().address(), read_text(tls_file("ca.pem"))); }

  std::string client_bin() const { return std::string(EXL3_BIN_DIR) + "/exl3-client"; }
};

TEST_F(ServerAuthTls, TlsClientWithTheTokenGetsEveryCallThrough) {
  expect_all(call_everything(trusted(), std::string("Bearer ") + kToken), grpc::StatusCode::OK, "right token");
  // The scheme is case-insensitive.
  expect_all(call_everything(trusted(), std::string("bearer ") + kToken), grpc::StatusCode::OK, "lower-case scheme");
}

TEST_F(ServerAuthTls, MissingOrWrongTokenIsUnauthenticated) {
  expect_all(call_everything(trusted(), ""), grpc::StatusCode::UNAUTHENTICATED, "no token");
  expect_all(call_everything(trusted(), "Bearer wrong-token"), grpc::StatusCode::UNAUTHENTICATED, "wrong token");
  expect_all(call_everything(trusted(), std::string("Bearer ") + kToken + "x"), grpc::StatusCode::UNAUTHENTICATED,
             "token with a suffix");
  expect_all(call_everything(trusted(), std::string("Basic ") + kToken), grpc::StatusCode::UNAUTHENTICATED,
             "another scheme");
  expect_all(call_everything(trusted(), std::string("Bearer ") + kToken), grpc::StatusCode::OK, "then the right one");
}

TEST_F(ServerAuthTls, HealthAnswersWithoutAToken) {
  HealthStatus health = HealthResponse::UNKNOWN;
  const grpc::Status s = health_check(trusted(), &health);
  EXPECT_TRUE(s.ok()) << describe(s);
  EXPECT_EQ(health, HealthResponse::SERVING);
}

TEST_F(ServerAuthTls, PlainClientFails) {
  HealthStatus health = HealthResponse::UNKNOWN;
  const grpc::Status h = health_check(server().channel(), &health, seconds(10));
  EXPECT_EQ(h.error_code(), grpc::StatusCode::UNAVAILABLE) << describe(h);
  expect_all(call_everything(server().channel(), std::string("Bearer ") + kToken), grpc::StatusCode::UNAVAILABLE,
             "plain client");
}

TEST_F(ServerAuthTls, ClientThatDoesNotTrustTheCertificateFails) {
  expect_all(call_everything(tls_channel(server().address(), read_text(tls_file("other_ca.pem"))),
                             std::string("Bearer ") + kToken),
             grpc::StatusCode::UNAVAILABLE, "untrusted certificate");
}

TEST_F(ServerAuthTls, Exl3ClientWithTlsCaAndTokenFile) {
  const std::vector<std::string> base = {client_bin(), "--server", server().address(), "--timeout", "30"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  const CommandResult ok = run_command(
      with({"--tls-ca", tls_file("ca.pem"), "--auth-token-file", token_file(), "info"}), seconds(60), "client_ok");
  EXPECT_TRUE(ok.exited_with(0)) << ok.describe();
  EXPECT_NE(ok.output.find("LlamaForCausalLM"), std::string::npos) << ok.describe();
  const CommandResult gen =
      run_command(with({"--tls-ca", tls_file("ca.pem"), "--auth-token-file", token_file(), "generate", "Hello",
                        "--max-new-tokens", "4", "--temperature", "0"}),
                  seconds(60), "client_generate");
  EXPECT_TRUE(gen.exited_with(0)) << gen.describe();
  const CommandResult no_token = run_command(with({"--tls-ca", tls_file("ca.pem"), "info"}), seconds(60), "client_nt");
  EXPECT_TRUE(no_token.exited_with(1)) << no_token.describe();
  EXPECT_NE(no_token.output.find("UNAUTHENTICATED"), std::string::npos) << no_token.describe();
  const CommandResult plain = run_command(with({"--auth-token-file", token_file(), "info"}), seconds(60), "client_pl");
  EXPECT_TRUE(plain.exited_with(1)) << plain.describe();
  EXPECT_NE(plain.output.find("UNAVAILABLE"), std::string::npos) << plain.describe();
  const CommandResult empty =
      run_command(with({"--auth-token-file", write_work_file("client_empty_token", " \n"), "info"}), seconds(60),
                  "client_empty");
  EXPECT_TRUE(empty.exited_with(2)) << empty.describe();
  EXPECT_NE(empty.output.find("holds no token"), std::string::npos) << empty.describe();
}

// Auth without TLS, on a server of its own.
TEST(ServerAuthPlain, TokenWithoutTls) {
  LaunchConfig config;
  config.workers = 1;
  config.max_seq_len = 256;
  config.max_batch = 2;
  config.log_name = "server_auth_plain";
  config.extra_args = {"--auth-token-file", token_file()};
  absl::StatusOr<std::unique_ptr<LaunchedServer>> server = LaunchedServer::start(config, seconds(60));
  ASSERT_TRUE(server.ok()) << server.status();
  expect_all(call_everything((*server)->channel(), ""), grpc::StatusCode::UNAUTHENTICATED, "no token");
  expect_all(call_everything((*server)->channel(), "Bearer nope"), grpc::StatusCode::UNAUTHENTICATED, "wrong token");
  expect_all(call_everything((*server)->channel(), std::string("Bearer ") + kToken), grpc::StatusCode::OK,
             "right token");
  HealthStatus health = HealthResponse::UNKNOWN;
  EXPECT_TRUE(health_check((*server)->channel(), &health).ok());
  EXPECT_EQ(health, HealthResponse::SERVING);
  const std::optional<int> exit = (*server)->stop(std::chrono::seconds(20));
  EXPECT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << (exit ? describe_wait_status(*exit) : "still running") << "\n" << (*server)->log_tail();
}

// Bad security files stop both servers at start-up, before any model loads or worker starts.
TEST(ServerAuthTlsFlags, BadFilesAreRefusedAtStartUp) {
  const std::string empty = write_work_file("empty_token", "\n\n");
  const std::string missing = std::string(EXL3_TEST_WORK_DIR) + "/no-such-token-file";
  const std::string not_pem = write_work_file("not_pem", "hello");
  struct Case {
    std::vector<std::string> flags;
    std::string expected;
  };
  const Case cases[] = {
      {{"--auth-token-file", empty}, "--auth-token-file " + empty + ": the file holds no token"},
      {{"--auth-token-file", missing}, "--auth-token-file " + missing + ": cannot read the file"},
      {{"--tls-cert", tls_file("server.pem")}, "--tls-cert and --tls-key go together"},
      {{"--tls-cert", not_pem, "--tls-key", tls_file("server.key")}, "--tls-cert " + not_pem + ": no PEM certificate"},
      {{"--tls-cert", tls_file("server.pem"), "--tls-key", not_pem}, "--tls-key " + not_pem + ": no PEM private key"},
  };
  for (const std::string binary : {"exl3-launch", "exl3-coordinator"}) {
    for (const Case& c : cases) {
      std::vector<std::string> argv = {std::string(EXL3_BIN_DIR) + "/" + binary, "--model", fixture_model_dir(),
                                       "--port", "0"};
      if (binary == "exl3-launch") {
        argv.insert(argv.end(), {"--cpu-workers", "1"});
      } else {
        argv.insert(argv.end(), {"--world", "1"});
      }
      argv.insert(argv.end(), c.flags.begin(), c.flags.end());
      const CommandResult r = run_command(argv, seconds(30), "bad_security_file");
      EXPECT_TRUE(r.exited_with(2)) << binary << " " << c.expected << ": " << r.describe();
      EXPECT_NE(r.output.find(c.expected), std::string::npos) << binary << ": " << r.describe();
    }
  }
}

}  // namespace
}  // namespace exl3::testing
