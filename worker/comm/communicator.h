// Communicator: the collectives a tensor-parallel or layer-split rank needs, each with a
// deadline. Backends: Gloo (CPU workers, host F32) and NCCL (GPU workers, device F32/F16/BF16 on
// the stream the communicator was made with), chosen explicitly by the caller, never as a fallback. Errors (peer gone, deadline passed) come back as absl::Status;
// after an error the communicator is unusable and the group must be torn down.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/tensor.h"

namespace exl3 {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In-place elementwise sum over all ranks; every rank passes the same length.
  virtual absl::Status all_reduce_sum(std::span<float> data) = 0;
  // Concatenates each rank's `send` (sizes may differ per rank: counts[r] elements from rank r)
  // into `recv` in rank order on every rank. recv.size() == sum(counts).
  virtual absl::Status all_gather(std::span<const float> send, std::span<float> recv,
                                  std::span<const int64_t> counts) = 0;
  // Copies root's `data` into every rank's `data`.
  virtual absl::Status broadcast(std::span<float> data, int root) = 0;
  virtual absl::Status send(std::span<const float> data, int dst_rank) = 0;
  virtual absl::Status recv(std::span<float> data, int src_rank) = 0;
  virtual absl::Status barrier() = 0;

  // Typed collectives on tensors, the form model code uses. Counts are in elements. The defaults
  // take host F32 tensors through the span calls above (Gloo); a device backend overrides them
  // for its own device and dtypes. A tensor the backend cannot take is INVALID_ARGUMENT.
  virtual absl::Status all_reduce_sum(Tensor& t) {
    EXL3_RETURN_IF_ERROR(check_host_f32(t, "all_reduce_sum"));
    return all_reduce_sum(std::span<float>(t.mutable_data<float>(), t.numel()));
  }
  virtual absl::Status all_gather(const Tensor& send, Tensor& recv, std::span<const int64_t> counts) {
    EXL3_RETURN_IF_ERROR(check_host_f32(send, "all_gather"));
    EXL3_RETURN_IF_ERROR(check_host_f32(recv, "all_gather"));
    return all_gather(std::span<const float>(send.data<float>(), send.numel()),
                      std::span<float>(recv.mutable_data<float>(), recv.numel()), counts);
  }
  virtual absl::Status broadcast(Tensor& t, int root) {
    EXL3_RETURN_IF_ERROR(check_host_f32(t, "broadcast"));
    return broadcast(std::span<float>(t.mutable_data<float>(), t.numel()), root);
  }
  virtual absl::Status send(const Tensor& t, int dst_rank) {
    EXL3_RETURN_IF_ERROR(check_host_f32(t, "send"));
    return send(std::span<const float>(t.data<float>(), t.numel()), dst_rank);
  }
  virtual absl::Status recv(Tensor& t, int src_rank) {
    EXL3_RETURN_IF_ERROR(check_host_f32(t, "recv"));
    return recv(std::span<float>(t.mutable_data<float>(), t.numel()), src_rank);
  }

  // residual += the sum over all ranks of `part`, as one collective (the all-reduce fused with the
  // residual add) where fuses_residual_add says this communicator can; `part` may be left holding
  // anything. Callers ask fuses_residual_add first and otherwise all-reduce `part` and add it
  // themselves. The answer depends only on the tensors' device, dtypes and sizes, so every rank,
  // asking with the same shapes, takes the same path.
  virtual bool fuses_residual_add(const Tensor& part, const Tensor& residual) const {
    (void)part;
    (void)residual;
    return false;
  }
  virtual absl::Status all_reduce_add(Tensor& part, Tensor& residual) {
    (void)part;
    (void)residual;
    return absl::UnimplementedError("all_reduce_add: this communicator does not fuse the residual add");
  }

  // Waits, within the communicator's deadline, until every collective issued so far is complete on
  // the device. A backend that returns from each call once it is queued (NCCL without
  // wait_each_op, so that a step has no host sync until its end) is flushed once per step, before
  // the step's results are read; synchronous backends (Gloo) have nothing to wait for.
  virtual absl::Status flush() { return absl::OkStatus(); }

  // True when all_reduce_sum and all_gather of device tensors only enqueue work on the stream (no
  // host wait, event or allocation), so that they can be captured in a CUDA graph (step graphs).
  virtual bool supports_graph_capture() const { return false; }

 protected:
  static absl::Status check_host_f32(const Tensor& t, const char* op) {
    if (t.on_host() && t.dtype() == DType::kF32) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(op, ": this communicator takes host F32 tensors, not ",
                                                   device_name(t.device()), " ", dtype_name(t.dtype())));
  }
};

// Key/value store the ranks rendezvous through (served by the coordinator).
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status set(const std::string& key, const std::vector<char>& value) = 0;
  // Waits until every key exists or the timeout passes (DEADLINE_EXCEEDED naming the missing keys).
  virtual absl::StatusOr<std::vector<std::vector<char>>> get(const std::vector<std::string>& keys,
                                                             std::chrono::milliseconds timeout) = 0;
};

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  std::string host = "127.0.0.1";            // address the TCP transport binds to
  std::string prefix = "exl3";               // key prefix in the store (one per run of the group)
  std::chrono::milliseconds timeout{30000};  // deadline of rendezvous and of every collective
};

// Connects a full mesh of Gloo TCP pairs through `store`. The store must outlive the call only.
absl::StatusOr<std::unique_ptr<Communicator>> make_gloo_communicator(const GlooOptions& options,
                                                                     RendezvousStore& store);

// A world of one: every collective is a copy or a no-op (single-process runs).
std::unique_ptr<Communicator> make_single_rank_communicator();

}  // namespace exl3
