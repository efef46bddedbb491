// Secrets that travel as gRPC metadata: read from a file named by a flag, and compared in
// constant time. Shared by the public API's bearer token (coordinator/server/server_credentials)
// and the control plane's cluster secret (cluster_secret.h).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace exl3 {

// The text of `path` without surrounding whitespace: printable ASCII without spaces, at least one
// character. INVALID_ARGUMENT "<flag> <path>: ..." otherwise, calling the text `noun` ("token",
// "secret"); the file's content never appears in a message.
absl::StatusOr<std::string> read_secret_file(const std::string& path, const std::string& flag,
                                             const std::string& noun);

// Equal strings, in time that depends only on the lengths (never on where they differ).
bool same_secret(std::string_view a, std::string_view b);

}  // namespace exl3
