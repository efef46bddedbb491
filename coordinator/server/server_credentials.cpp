// Bearer token and TLS key pair of the public API (see server_credentials.h).
#include "coordinator/server/server_credentials.h"

#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/secret_text.h"

namespace exl3 {
namespace {

absl::StatusOr<std::string> read_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read the file"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot read the file"));
  return text.str();
}

// The call's metadata value for `key`, or nullptr.
const grpc::string_ref* find_metadata(const grpc::ServerContext& context, const char* key) {
  const auto& md = context.client_metadata();
  auto it = md.find(key);
  return it == md.end() ? nullptr : &it->second;
}

}  // namespace

absl::StatusOr<std::string> read_token_file(const std::string& path, const std::string& flag) {
  return read_secret_file(path, flag, "token");
}

absl::StatusOr<PublicApiSecurity> load_public_api_security(const std::string& auth_token_file,
                                                           const std::string& tls_cert_file,
                                                           const std::string& tls_key_file) {
  PublicApiSecurity s;
  if (!auth_token_file.empty()) {
    absl::StatusOr<std::string> token = read_token_file(auth_token_file, "--auth-token-file");
    if (!token.ok()) return token.status();
    s.auth_token = *std::move(token);
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both (or neither, for plain TCP)");
  }
  if (tls_cert_file.empty()) return s;
  absl::StatusOr<std::string> cert = read_file(tls_cert_file, "--tls-cert");
  if (!cert.ok()) return cert.status();
  if (!absl::StrContains(*cert, "-----BEGIN CERTIFICATE-----")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert ", tls_cert_file, ": no PEM certificate (-----BEGIN CERTIFICATE-----) in the file"));
  }
  absl::StatusOr<std::string> key = read_file(tls_key_file, "--tls-key");
  if (!key.ok()) return key.status();
  if (!absl::StrContains(*key, "-----BEGIN") || !absl::StrContains(*key, "PRIVATE KEY-----")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", tls_key_file, ": no PEM private key (-----BEGIN ... PRIVATE KEY-----) in the file"));
  }
  s.tls_cert_pem = *std::move(cert);
  s.tls_key_pem = *std::move(key);
  return s;
}

std::shared_ptr<grpc::ServerCredentials> public_api_credentials(const PublicApiSecurity& security) {
  if (!security.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({security.tls_key_pem, security.tls_cert_pem});
  return grpc::SslServerCredentials(options);
}

grpc::Status check_bearer_token(const grpc::ServerContext& context, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const grpc::string_ref* value = find_metadata(context, "authorization");
  if (value == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this server requires \"authorization: Bearer <token>\" metadata on every call");
  }
  const std::string_view v(value->data(), value->size());
  constexpr std::string_view kScheme = "bearer ";
  if (v.size() < kScheme.size() || absl::AsciiStrToLower(std::string(v.substr(0, kScheme.size()))) != kScheme) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the authorization metadata must be \"Bearer <token>\"");
  }
  if (!same_secret(v.substr(kScheme.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the bearer token is not valid for this server");
  }
  return grpc::Status::OK;
}

}  // namespace exl3
