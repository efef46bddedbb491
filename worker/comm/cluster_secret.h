// The control plane's cluster secret: a per-run shared secret that every worker sends with each
// Control RPC (metadata "x-exl3-cluster-secret") and the coordinator checks in constant time, so
// that a stray process reaching the control port cannot join as a rank or touch the rendezvous
// store. exl3-launch makes one per run and hands it to its workers in a private 0600 file; on
// several hosts the operator passes the same file to exl3-coordinator and every exl3-worker with
// --cluster-secret-file. The secret never appears in a message or a log line.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace exl3 {

inline constexpr char kClusterSecretMetadata[] = "x-exl3-cluster-secret";
inline constexpr char kClusterSecretFlag[] = "--cluster-secret-file";

// The secret in `path` (read_secret_file in secret_text.h, naming --cluster-secret-file); compare
// secrets with same_secret.
absl::StatusOr<std::string> read_cluster_secret_file(const std::string& path);

// A fresh secret: `bytes` random bytes from /dev/urandom, in lowercase hex.
absl::StatusOr<std::string> make_cluster_secret(int bytes = 32);

// OK when `secret` is empty or the call carries it; UNAUTHENTICATED otherwise, "... cluster secret
// missing / wrong (--cluster-secret-file) from <peer>".
grpc::Status check_cluster_secret(const grpc::ServerContext& context, const std::string& secret);

// Whether `host` is this machine only: "localhost", 127.0.0.0/8 or ::1 (brackets allowed).
bool is_loopback_host(const std::string& host);

// An insecure channel to the control plane whose every call carries `secret` (none when empty).
std::shared_ptr<grpc::Channel> make_control_channel(const std::string& target, const grpc::ChannelArguments& args,
                                                    const std::string& secret);

// A private directory (mode 0700, under `temp_dir`: the caller's $TMPDIR or /tmp) holding one
// file (mode 0600) with the secret; both are removed by the destructor.
class ClusterSecretFile {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterSecretFile>> create(const std::string& secret,
                                                                   const std::string& temp_dir);
  ~ClusterSecretFile();
  ClusterSecretFile(const ClusterSecretFile&) = delete;
  ClusterSecretFile& operator=(const ClusterSecretFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  ClusterSecretFile(std::string dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}
  std::string dir_;
  std::string path_;
};

}  // namespace exl3
