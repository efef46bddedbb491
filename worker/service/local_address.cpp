// The local interface address toward a peer (local_address.h).
#include "worker/service/local_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace exl3 {

absl::StatusOr<std::pair<std::string, int>> split_host_port(const std::string& address) {
  std::string host;
  std::string port_text;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not [ADDR]:PORT"));
    }
    host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not HOST:PORT"));
    }
    host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\": port \"", port_text, "\" is not in 1..65535"));
  }
  return std::make_pair(host, port);
}

absl::StatusOr<std::string> local_address_toward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve \"", host, "\": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no route to ", host));
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    const bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    const int err = errno;
    close(fd);
    if (!ok) {
      last = absl::UnavailableError(absl::StrCat("no route to ", host, ": ", std::strerror(err)));
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = local.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                                                   : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, addr, text, sizeof(text)) == nullptr) continue;
    freeaddrinfo(found);
    return std::string(text);
  }
  freeaddrinfo(found);
  return last;
}

}  // namespace exl3
