// Security of the public API: an optional bearer token (--auth-token-file) and an optional TLS key
// pair (--tls-cert, --tls-key), read from their files once at start-up and refused there, by flag
// and path, when unreadable, empty or malformed. The token is checked at the top of every
// exl3.v1.Inference handler (check_bearer_token); the standard health and reflection services
// stay open. TLS uses gRPC's own SslServerCredentials (no client certificates).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace exl3 {

struct PublicApiSecurity {
  std::string auth_token;    // empty = no authentication
  std::string tls_cert_pem;  // both empty = plain TCP
  std::string tls_key_pem;
  bool tls() const { return !tls_cert_pem.empty(); }
};

// The token in `path` (surrounding whitespace removed): printable ASCII without spaces, at least
// one character. `flag` names the option in messages.
absl::StatusOr<std::string> read_token_file(const std::string& path, const std::string& flag);

// Reads the files the flags name (an empty path = that feature off). --tls-cert and --tls-key go
// together; each must hold PEM (a certificate, a private key).
absl::StatusOr<PublicApiSecurity> load_public_api_security(const std::string& auth_token_file,
                                                           const std::string& tls_cert_file,
                                                           const std::string& tls_key_file);

// SslServerCredentials with the key pair, or InsecureServerCredentials without TLS.
std::shared_ptr<grpc::ServerCredentials> public_api_credentials(const PublicApiSecurity& security);

// OK when `token` is empty or the call carries "authorization: Bearer <token>" metadata (the
// scheme's case ignored, the token compared in constant time); UNAUTHENTICATED otherwise.
grpc::Status check_bearer_token(const grpc::ServerContext& context, const std::string& token);

}  // namespace exl3
