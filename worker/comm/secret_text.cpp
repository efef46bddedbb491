// Secret files and constant-time comparison (secret_text.h).
#include "worker/comm/secret_text.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace exl3 {

absl::StatusOr<std::string> read_secret_file(const std::string& path, const std::string& flag,
                                             const std::string& noun) {
  const auto error = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", why));
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error("cannot read the file");
  const std::string secret(absl::StripAsciiWhitespace(text.str()));
  if (secret.empty()) return error(absl::StrCat("the file holds no ", noun));
  for (char c : secret) {
    if (c <= ' ' || c > '~') {
      return error(absl::StrCat("the ", noun, " must be printable ASCII without spaces (it is sent as gRPC metadata)"));
    }
  }
  return secret;
}

bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace exl3
