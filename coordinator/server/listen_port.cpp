// Port probe and exclusive listening ports (see listen_port.h).
#include "coordinator/server/listen_port.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::Status check_port_free(const std::string& host, int port, const std::string& what) {
  if (port == 0) return absl::OkStatus();
  std::string name = host;
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(name.empty() ? nullptr : name.c_str(), service.c_str(), &hints, &found) != 0) {
    return absl::OkStatus();  // gRPC resolves it again and says what is wrong
  }
  absl::Status status = absl::OkStatus();
  for (const addrinfo* a = found; a != nullptr && status.ok(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) {
      status = absl::UnavailableError(absl::StrCat(host, ":", port, " (", what,
                                                   ") is already in use by another process: stop it or choose "
                                                   "another port (0 = any free port)"));
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return status;
}

void disable_port_sharing(grpc::ServerBuilder& builder) { builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0); }

}  // namespace exl3
