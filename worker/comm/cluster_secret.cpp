// Cluster secret of the control plane: reading, making, checking, sending (see cluster_secret.h).
#include "worker/comm/cluster_secret.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/support/client_interceptor.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/secret_text.h"

namespace exl3 {
namespace {

// Adds the secret to the initial metadata of every call on the channel.
class SecretInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit SecretInterceptor(std::string secret) : secret_(std::move(secret)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kClusterSecretMetadata, secret_);
    }
    methods->Proceed();
  }

 private:
  const std::string secret_;
};

class SecretInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit SecretInterceptorFactory(std::string secret) : secret_(std::move(secret)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new SecretInterceptor(secret_);
  }

 private:
  const std::string secret_;
};

absl::Status errno_error(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::string> read_cluster_secret_file(const std::string& path) {
  return read_secret_file(path, kClusterSecretFlag, "secret");
}

absl::StatusOr<std::string> make_cluster_secret(int bytes) {
  if (bytes <= 0) return absl::InvalidArgumentError(absl::StrCat("cluster secret of ", bytes, " bytes"));
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("opening /dev/urandom for the cluster secret");
  std::vector<unsigned char> raw(static_cast<size_t>(bytes));
  size_t got = 0;
  while (got < raw.size()) {
    const ssize_t n = ::read(fd, raw.data() + got, raw.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status s = errno_error("reading /dev/urandom for the cluster secret");
      ::close(fd);
      return s;
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret;
  secret.reserve(raw.size() * 2);
  for (unsigned char b : raw) {
    secret.push_back(kHex[b >> 4]);
    secret.push_back(kHex[b & 15]);
  }
  return secret;
}

grpc::Status check_cluster_secret(const grpc::ServerContext& context, const std::string& secret) {
  if (secret.empty()) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  const auto it = md.find(kClusterSecretMetadata);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("control plane: cluster secret missing (", kClusterSecretFlag, ") from ",
                                     context.peer()));
  }
  if (!same_secret(std::string_view(it->second.data(), it->second.size()), secret)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("control plane: cluster secret wrong (", kClusterSecretFlag, ") from ",
                                     context.peer()));
  }
  return grpc::Status::OK;
}

bool is_loopback_host(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

std::shared_ptr<grpc::Channel> make_control_channel(const std::string& target, const grpc::ChannelArguments& args,
                                                    const std::string& secret) {
  if (secret.empty()) return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<SecretInterceptorFactory>(secret));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, grpc::InsecureChannelCredentials(), args,
                                                                 std::move(interceptors));
}

absl::StatusOr<std::unique_ptr<ClusterSecretFile>> ClusterSecretFile::create(const std::string& secret,
                                                                             const std::string& temp_dir) {
  std::string pattern = absl::StrCat(temp_dir.empty() ? "/tmp" : temp_dir, "/exl3-secret-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) return errno_error(absl::StrCat("creating a private directory ", pattern));
  const std::string path = pattern + "/cluster-secret";
  std::unique_ptr<ClusterSecretFile> file(new ClusterSecretFile(pattern, path));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errno_error(absl::StrCat("creating ", path));
  size_t written = 0;
  while (written < secret.size()) {
    const ssize_t n = ::write(fd, secret.data() + written, secret.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status s = errno_error(absl::StrCat("writing ", path));
      ::close(fd);
      return s;
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return errno_error(absl::StrCat("closing ", path));
  return file;
}

ClusterSecretFile::~ClusterSecretFile() {
  ::unlink(path_.c_str());
  ::rmdir(dir_.c_str());
}

}  // namespace exl3
