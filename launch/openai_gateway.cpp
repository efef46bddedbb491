// exl3-launch's OpenAI gateway child; see openai_gateway.h.
#include "launch/openai_gateway.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace exl3 {
namespace {

constexpr auto kReadyPoll = std::chrono::milliseconds(50);

bool readable_now(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

// The ready file's "HOST:PORT" once the gateway has written it whole (it renames it into place).
std::optional<std::string> read_ready_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line) || line.empty()) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

std::optional<std::string> find_gateway_root(const std::string& exe_dir) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::weakly_canonical(exe_dir, ec);
  if (ec) dir = exe_dir;
  for (int up = 0; up < 6 && !dir.empty(); ++up) {
    if (std::filesystem::exists(dir / "gateway" / "exl3-gateway", ec)) return dir.string();
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  return std::nullopt;
}

std::string local_target(const std::string& host, int port) {
  std::string h = host;
  if (h.empty() || h == "0.0.0.0") h = "127.0.0.1";
  if (h == "::" || h == "[::]") h = "[::1]";
  if (h.find(':') != std::string::npos && h.front() != '[') h = absl::StrCat("[", h, "]");
  return absl::StrCat(h, ":", port);
}

absl::StatusOr<std::unique_ptr<OpenAiGateway>> OpenAiGateway::start(const OpenAiGatewayOptions& o,
                                                                    const std::string& grpc_target,
                                                                    const std::string& model_dir, int wake_fd) {
  std::unique_ptr<OpenAiGateway> gateway(new OpenAiGateway());
  std::string dir_template = (std::filesystem::temp_directory_path() / "exl3-openai-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a temporary folder for the gateway's ready file"));
  }
  gateway->temp_dir_ = dir_template;
  const std::string ready_file = gateway->temp_dir_ + "/ready";

  ProcessSpec spec;
  spec.label = "openai";
  spec.argv = {o.python, o.script, "--grpc", grpc_target, "--host", o.host, "--port", std::to_string(o.port),
               "--model-dir", model_dir, "--ready-file", ready_file};
  const std::pair<const char*, const std::string*> optional_flags[] = {
      {"--api-key-file", &o.api_key_file},          {"--chat-template", &o.chat_template},
      {"--served-model-name", &o.model_name},       {"--grpc-auth-token-file", &o.grpc_auth_token_file},
      {"--grpc-tls-ca", &o.grpc_tls_ca},
  };
  for (const auto& [flag, value] : optional_flags) {
    if (!value->empty()) spec.argv.insert(spec.argv.end(), {flag, *value});
  }
  // Unbuffered output (lines reach the prefixing pump as written); no __pycache__ in the checkout.
  spec.env = {{"PYTHONUNBUFFERED", "1"}, {"PYTHONDONTWRITEBYTECODE", "1"}};
  std::vector<ProcessSpec> specs;
  specs.push_back(std::move(spec));
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ProcessGroup::spawn(std::move(specs));
  if (!group.ok()) return group.status();
  gateway->group_ = std::move(*group);

  const auto deadline = ProcessClock::now() + o.ready_timeout;
  while (true) {
    if (std::optional<std::string> address = read_ready_file(ready_file)) {
      gateway->address_ = *address;
      return gateway;
    }
    absl::StatusOr<std::optional<ChildExit>> exited = gateway->group_->wait_any(ProcessClock::now() + kReadyPoll);
    if (!exited.ok()) return exited.status();
    if (exited->has_value()) {
      gateway->exited_ = true;
      return absl::FailedPreconditionError(absl::StrCat(
          "the OpenAI gateway did not start: ", (*exited)->describe(), " before listening on ", o.host, ":", o.port,
          " (its message is above, prefixed [openai]; ", o.python, " ", o.script, ")"));
    }
    if (readable_now(wake_fd)) {
      gateway->stop(std::chrono::milliseconds(2000));
      return absl::CancelledError("a stop signal arrived while the OpenAI gateway was starting");
    }
    if (ProcessClock::now() >= deadline) {
      gateway->stop(std::chrono::milliseconds(2000));
      return absl::DeadlineExceededError(absl::StrCat(
          "the OpenAI gateway was not listening on ", o.host, ":", o.port, " within ",
          std::chrono::duration_cast<std::chrono::seconds>(o.ready_timeout).count(), " s (--openai-ready-timeout)"));
    }
  }
}

OpenAiGateway::~OpenAiGateway() {
  if (group_ != nullptr && !exited_) stop(std::chrono::milliseconds(2000));
  group_.reset();
  std::error_code ec;
  if (!temp_dir_.empty()) std::filesystem::remove_all(temp_dir_, ec);
}

absl::StatusOr<std::optional<ChildExit>> OpenAiGateway::poll() {
  if (exited_) return std::nullopt;
  absl::StatusOr<std::optional<ChildExit>> exited = group_->wait_any(ProcessClock::now());
  if (exited.ok() && exited->has_value()) exited_ = true;
  return exited;
}

void OpenAiGateway::stop(std::chrono::milliseconds grace) {
  if (exited_) return;
  exited_ = true;
  absl::StatusOr<std::vector<ChildExit>> exits = group_->terminate_all(grace);
  if (!exits.ok()) {
    std::fprintf(stderr, "exl3-launch: stopping the OpenAI gateway: %s\n", std::string(exits.status().message()).c_str());
    return;
  }
  for (const ChildExit& e : *exits) {
    // SIGTERM is how it is told to stop; uvicorn then exits 0.
    if (!e.success() && e.signal != SIGTERM) std::fprintf(stderr, "exl3-launch: %s\n", e.describe().c_str());
  }
}

}  // namespace exl3
