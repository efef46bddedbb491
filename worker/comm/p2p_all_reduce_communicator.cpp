// The P2P all-reduce communicator: buffer set-up and mapping through the rendezvous store, the
// choice between the one-shot kernel and the inner communicator, flush and teardown.
#include "worker/comm/p2p_all_reduce_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/oneshot_all_reduce.h"
#include "worker/comm/scoped_device.h"

namespace exl3 {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kMaxBytesLimit = int64_t{64} << 20;
constexpr int kHostNameBytes = 256;

// What each rank publishes about its receive buffer.
struct BufferRecord {
  char host[kHostNameBytes];
  int64_t pid;
  int32_t device;
  int32_t has_ipc_handle;
  uint64_t address;
  cudaIpcMemHandle_t handle;
};

std::vector<char> to_bytes(const BufferRecord& r) {
  std::vector<char> bytes(sizeof(r));
  std::memcpy(bytes.data(), &r, sizeof(r));
  return bytes;
}

std::string this_host() {
  std::array<char, kHostNameBytes> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown-host";
  return std::string(name.data());
}

// Time left until `deadline`, at least 1 ms (a store wait then reports what is missing).
milliseconds time_left(Clock::time_point deadline) {
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

absl::Status cuda_failure(const std::string& who, const char* what, cudaError_t err) {
  cudaGetLastError();
  return absl::InternalError(
      absl::StrCat(who, ": ", what, " failed: ", cudaGetErrorName(err), ", ", cudaGetErrorString(err)));
}

class P2pAllReduceCommunicator final : public Communicator {
 public:
  P2pAllReduceCommunicator(P2pAllReduceOptions options, std::unique_ptr<Communicator> inner)
      : options_(std::move(options)), inner_(std::move(inner)) {}
  P2pAllReduceCommunicator(const P2pAllReduceCommunicator&) = delete;
  P2pAllReduceCommunicator& operator=(const P2pAllReduceCommunicator&) = delete;
  ~P2pAllReduceCommunicator() override;

  absl::Status init(RendezvousStore& store);

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }

  absl::Status all_reduce_sum(std::span<float> data) override { return inner_->all_reduce_sum(data); }
  absl::Status all_gather(std::span<const float> send, std::span<float> recv,
                          std::span<const int64_t> counts) override {
    return inner_->all_gather(send, recv, counts);
  }
  absl::Status broadcast(std::span<float> data, int root) override { return inner_->broadcast(data, root); }
  absl::Status send(std::span<const float> data, int dst_rank) override { return inner_->send(data, dst_rank); }
  absl::Status recv(std::span<float> data, int src_rank) override { return inner_->recv(data, src_rank); }
  absl::Status barrier() override { return inner_->barrier(); }

  absl::Status all_reduce_sum(Tensor& t) override {
    if (!one_shot(t)) return inner_->all_reduce_sum(t);
    return run(t, t, /*accumulate=*/false);
  }
  absl::Status all_gather(const Tensor& send, Tensor& recv, std::span<const int64_t> counts) override {
    return inner_->all_gather(send, recv, counts);
  }
  absl::Status broadcast(Tensor& t, int root) override { return inner_->broadcast(t, root); }
  absl::Status send(const Tensor& t, int dst_rank) override { return inner_->send(t, dst_rank); }
  absl::Status recv(Tensor& t, int src_rank) override { return inner_->recv(t, src_rank); }

  bool fuses_residual_add(const Tensor& part, const Tensor& residual) const override {
    return one_shot(part) && residual.device() == Device::kCuda && residual.numel() == part.numel() &&
           (residual.dtype() == part.dtype() || residual.dtype() == DType::kF32);
  }
  absl::Status all_reduce_add(Tensor& part, Tensor& residual) override {
    if (!fuses_residual_add(part, residual)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all_reduce_add (", who(), "): ", dtype_name(part.dtype()), " part of ", part.numel(), " elements into ",
          dtype_name(residual.dtype()), " residual of ", residual.numel(), " is not a one-shot pair"));
    }
    return run(part, residual, /*accumulate=*/true);
  }

  absl::Status flush() override;
  bool supports_graph_capture() const override { return inner_->supports_graph_capture(); }

 private:
  std::string who() const {
    return absl::StrCat("one-shot all-reduce, rank ", options_.rank, " of ", options_.world_size, " on device ",
                        options_.device, ", store prefix '", options_.prefix, "'");
  }

  bool one_shot(const Tensor& t) const {
    return t.device() == Device::kCuda && is_float_dtype(t.dtype()) &&
           static_cast<int64_t>(t.nbytes()) <= options_.max_bytes;
  }

  absl::Status usable() const {
    if (failed_.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("communicator unusable after an earlier error: ", failed_.message()));
  }
  absl::Status fail(absl::Status status) {
    if (failed_.ok()) failed_ = status;
    return status;
  }

  absl::Status run(const Tensor& part, Tensor& out, bool accumulate);
  absl::Status map_peer(int peer, const BufferRecord& record, const BufferRecord& own);
  absl::Status agree_ready(RendezvousStore& store, const absl::Status& mine, Clock::time_point deadline);
  void fill_call();

  const P2pAllReduceOptions options_;
  std::unique_ptr<Communicator> inner_;
  // What every call passes the kernel besides its tensors (filled once the buffers are mapped).
  OneshotAllReduceParams call_;
  void* buffer_ = nullptr;
  oneshot::State* state_ = nullptr;
  uint32_t* host_error_ = nullptr;         // pinned, mapped
  uint32_t* host_error_device_ = nullptr;  // its device address
  cudaEvent_t done_ = nullptr;
  std::array<void*, oneshot::kMaxRanks> buffers_{};
  std::array<bool, oneshot::kMaxRanks> ipc_mapped_{};
  bool published_ = false;  // a peer may have mapped buffer_
  bool ready_ = false;      // every rank mapped every buffer
  int sm_count_ = 1;
  absl::Status failed_;
};

P2pAllReduceCommunicator::~P2pAllReduceCommunicator() {
  ScopedDevice device;
  if (!device.enter(options_.device).ok()) return;
  cudaStreamSynchronize(options_.stream);
  for (int r = 0; r < oneshot::kMaxRanks; ++r) {
    if (ipc_mapped_[r]) cudaIpcCloseMemHandle(buffers_[r]);
  }
  // Free the buffer only once every peer has unmapped it; after a failed set-up or call it stays
  // allocated (a peer may still map it).
  bool peers_done = !published_;
  if (ready_ && failed_.ok()) peers_done = inner_->barrier().ok() && inner_->flush().ok();
  if (peers_done && buffer_ != nullptr) cudaFree(buffer_);
  if (state_ != nullptr) cudaFree(state_);
  if (host_error_ != nullptr) cudaFreeHost(host_error_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  cudaGetLastError();
}

absl::Status P2pAllReduceCommunicator::init(RendezvousStore& store) {
  const Clock::time_point deadline = Clock::now() + options_.init_timeout;
  ScopedDevice device;
  EXL3_RETURN_IF_ERROR(device.enter(options_.device));
  if (cudaError_t err = cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, options_.device);
      err != cudaSuccess) {
    return cuda_failure(who(), "cudaDeviceGetAttribute", err);
  }
  const auto bytes = static_cast<size_t>(oneshot::buffer_bytes(options_.world_size, options_.max_bytes));
  if (cudaError_t err = cudaMalloc(&buffer_, bytes); err != cudaSuccess) {
    buffer_ = nullptr;
    return cuda_failure(who(), absl::StrCat("cudaMalloc of the ", bytes, "-byte receive buffer").c_str(), err);
  }
  if (cudaError_t err = cudaMalloc(&state_, sizeof(oneshot::State)); err != cudaSuccess) {
    state_ = nullptr;
    return cuda_failure(who(), "cudaMalloc of the call state", err);
  }
  if (cudaError_t err = cudaHostAlloc(&host_error_, sizeof(uint32_t), cudaHostAllocMapped); err != cudaSuccess) {
    host_error_ = nullptr;
    return cuda_failure(who(), "cudaHostAlloc of the error word", err);
  }
  *host_error_ = 0;
  if (cudaError_t err = cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_error_device_), host_error_, 0);
      err != cudaSuccess) {
    return cuda_failure(who(), "cudaHostGetDevicePointer of the error word", err);
  }
  if (cudaError_t err = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming); err != cudaSuccess) {
    done_ = nullptr;
    return cuda_failure(who(), "cudaEventCreate", err);
  }
  if (cudaError_t err = cudaMemset(buffer_, 0, bytes); err != cudaSuccess) {
    return cuda_failure(who(), "cudaMemset", err);
  }
  if (cudaError_t err = cudaMemset(state_, 0, sizeof(oneshot::State)); err != cudaSuccess) {
    return cuda_failure(who(), "cudaMemset", err);
  }
  if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
    return cuda_failure(who(), "cudaDeviceSynchronize", err);
  }

  BufferRecord own{};
  std::strncpy(own.host, this_host().c_str(), kHostNameBytes - 1);
  own.pid = static_cast<int64_t>(getpid());
  own.device = options_.device;
  own.address = reinterpret_cast<uint64_t>(buffer_);
  own.has_ipc_handle = cudaIpcGetMemHandle(&own.handle, buffer_) == cudaSuccess ? 1 : 0;
  cudaGetLastError();
  const std::string key_prefix = absl::StrCat(options_.prefix, "/oneshot/");
  published_ = true;
  EXL3_RETURN_IF_ERROR(store.set(absl::StrCat(key_prefix, options_.rank), to_bytes(own)));

  std::vector<std::string> keys;
  std::vector<int> peers;
  for (int r = 0; r < options_.world_size; ++r) {
    if (r == options_.rank) continue;
    keys.push_back(absl::StrCat(key_prefix, r));
    peers.push_back(r);
  }
  buffers_[options_.rank] = buffer_;
  absl::Status mapped = absl::OkStatus();
  if (!keys.empty()) {
    absl::StatusOr<std::vector<std::vector<char>>> records = store.get(keys, time_left(deadline));
    if (!records.ok()) {
      return absl::Status(records.status().code(),
                          absl::StrCat(who(), ": waiting for the peers' buffers: ", records.status().message()));
    }
    for (size_t i = 0; i < peers.size() && mapped.ok(); ++i) {
      const std::vector<char>& bytes = (*records)[i];
      if (bytes.size() != sizeof(BufferRecord)) {
        mapped = absl::InternalError(absl::StrCat(who(), ": rank ", peers[i], "'s buffer record has ", bytes.size(),
                                                  " bytes, expected ", sizeof(BufferRecord)));
        break;
      }
      BufferRecord record;
      std::memcpy(&record, bytes.data(), sizeof(record));
      record.host[kHostNameBytes - 1] = '\0';
      mapped = map_peer(peers[i], record, own);
    }
  }
  fill_call();
  return agree_ready(store, mapped, deadline);
}

absl::Status P2pAllReduceCommunicator::map_peer(int peer, const BufferRecord& record, const BufferRecord& own) {
  const std::string pair = absl::StrCat(who(), ": rank ", peer, " (device ", record.device, " on ", record.host,
                                        ", process ", record.pid, ")");
  if (std::strcmp(record.host, own.host) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        pair, " is on another host than this rank (", own.host,
        "): the one-shot all-reduce needs every rank on one machine (use --all-reduce nccl)"));
  }
  if (record.pid == own.pid) {
    if (record.device != options_.device) {
      int can = 0;
      if (cudaError_t err = cudaDeviceCanAccessPeer(&can, options_.device, record.device); err != cudaSuccess) {
        return cuda_failure(pair, "cudaDeviceCanAccessPeer", err);
      }
      if (!can) {
        return absl::FailedPreconditionError(absl::StrCat(pair, ": device ", options_.device,
                                                          " cannot access its memory (no peer-to-peer path; use "
                                                          "--all-reduce nccl)"));
      }
      const cudaError_t err = cudaDeviceEnablePeerAccess(record.device, 0);
      if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
        return cuda_failure(pair, "cudaDeviceEnablePeerAccess", err);
      }
      cudaGetLastError();
    }
    buffers_[peer] = reinterpret_cast<void*>(record.address);
    return absl::OkStatus();
  }
  if (!record.has_ipc_handle) {
    return absl::FailedPreconditionError(
        absl::StrCat(pair, ": its buffer has no CUDA IPC handle (use --all-reduce nccl)"));
  }
  void* mapped = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&mapped, record.handle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(pair, ": cudaIpcOpenMemHandle failed: ", cudaGetErrorName(err),
                                                      ", ", cudaGetErrorString(err),
                                                      " (peer-to-peer access between the GPUs is needed; use "
                                                      "--all-reduce nccl)"));
  }
  buffers_[peer] = mapped;
  ipc_mapped_[peer] = true;
  return absl::OkStatus();
}

absl::Status P2pAllReduceCommunicator::agree_ready(RendezvousStore& store, const absl::Status& mine,
                                                   Clock::time_point deadline) {
  const std::string key_prefix = absl::StrCat(options_.prefix, "/oneshot/");
  const std::string verdict = mine.ok() ? std::string("ok") : std::string(mine.message());
  EXL3_RETURN_IF_ERROR(store.set(absl::StrCat(key_prefix, options_.rank, "/ready"),
                                 std::vector<char>(verdict.begin(), verdict.end())));
  if (!mine.ok()) return fail(mine);
  std::vector<std::string> keys;
  for (int r = 0; r < options_.world_size; ++r) {
    if (r != options_.rank) keys.push_back(absl::StrCat(key_prefix, r, "/ready"));
  }
  if (keys.empty()) {
    ready_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::vector<char>>> verdicts = store.get(keys, time_left(deadline));
  if (!verdicts.ok()) {
    return fail(absl::Status(verdicts.status().code(),
                             absl::StrCat(who(), ": waiting for the peers to map the buffers: ",
                                          verdicts.status().message())));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string text((*verdicts)[i].begin(), (*verdicts)[i].end());
    if (text != "ok") {
      return fail(absl::FailedPreconditionError(absl::StrCat(who(), ": a peer could not map the buffers: ", text)));
    }
  }
  ready_ = true;
  return absl::OkStatus();
}

void P2pAllReduceCommunicator::fill_call() {
  call_.rank = options_.rank;
  call_.world_size = options_.world_size;
  for (int r = 0; r < options_.world_size; ++r) call_.buffers[r] = buffers_[r];
  call_.slot_lines = oneshot::lines_for(options_.max_bytes);
  call_.state = state_;
  call_.host_error = host_error_device_;
  call_.timeout_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(options_.timeout).count());
  call_.max_blocks = options_.max_blocks > 0 ? options_.max_blocks : sm_count_;
}

absl::Status P2pAllReduceCommunicator::run(const Tensor& part, Tensor& out, bool accumulate) {
  EXL3_RETURN_IF_ERROR(usable());
  if (part.numel() == 0) return absl::OkStatus();
  ScopedDevice device;
  if (absl::Status status = device.enter(options_.device); !status.ok()) return fail(status);
  OneshotAllReduceParams p = call_;
  p.dtype = part.dtype();
  p.out_dtype = out.dtype();
  p.count = part.numel();
  p.input = part.raw();
  p.output = out.mutable_raw();
  p.accumulate = accumulate;
  launch_oneshot_all_reduce(p, options_.stream);
  if (options_.wait_each_op) return flush();
  return absl::OkStatus();
}

absl::Status P2pAllReduceCommunicator::flush() {
  EXL3_RETURN_IF_ERROR(usable());
  ScopedDevice device;
  if (absl::Status status = device.enter(options_.device); !status.ok()) return fail(status);
  if (cudaError_t err = cudaEventRecord(done_, options_.stream); err != cudaSuccess) {
    return fail(cuda_failure(who(), "cudaEventRecord", err));
  }
  // The kernel gives up on a peer after `timeout`; the stream gets that long again for the rest.
  const Clock::time_point deadline = Clock::now() + 2 * options_.timeout;
  for (int polls = 0;; ++polls) {
    const cudaError_t err = cudaEventQuery(done_);
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) return fail(cuda_failure(who(), "the stream", err));
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    if (Clock::now() >= deadline) {
      return fail(absl::DeadlineExceededError(absl::StrCat(
          who(), ": the stream did not finish within ", 2 * options_.timeout.count(), " ms; communicator unusable")));
    }
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  const uint32_t error = *reinterpret_cast<volatile uint32_t*>(host_error_);
  if (error != 0) {
    return fail(absl::DeadlineExceededError(absl::StrCat(who(), ": rank ", error - 1,
                                                         "'s part did not arrive within ", options_.timeout.count(),
                                                         " ms (peer gone or not taking part); communicator unusable")));
  }
  return inner_->flush();
}

}  // namespace

P2pAllReduceOptions p2p_all_reduce_options_of(const NcclOptions& nccl, int64_t max_bytes) {
  P2pAllReduceOptions o;
  o.rank = nccl.rank;
  o.world_size = nccl.world_size;
  o.device = nccl.device;
  o.stream = nccl.stream;
  o.prefix = nccl.prefix;
  o.max_bytes = max_bytes;
  o.timeout = nccl.timeout;
  o.init_timeout = nccl.init_timeout;
  o.wait_each_op = nccl.wait_each_op;
  return o;
}

absl::StatusOr<std::unique_ptr<Communicator>> make_p2p_all_reduce_communicator(const P2pAllReduceOptions& options,
                                                                              std::unique_ptr<Communicator> inner,
                                                                              RendezvousStore& store) {
  if (inner == nullptr) return absl::InvalidArgumentError("one-shot all-reduce: no inner communicator");
  if (options.world_size < 1 || options.world_size > oneshot::kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("one-shot all-reduce: a world of ", options.world_size,
                                                   " ranks (1..", oneshot::kMaxRanks, " supported)"));
  }
  if (inner->rank() != options.rank || inner->world_size() != options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("one-shot all-reduce: rank ", options.rank, " of ",
                                                   options.world_size, " over an inner communicator of rank ",
                                                   inner->rank(), " of ", inner->world_size()));
  }
  if (options.max_bytes < oneshot::kChunkBytes || options.max_bytes > kMaxBytesLimit) {
    return absl::InvalidArgumentError(absl::StrCat("one-shot all-reduce: max_bytes ", options.max_bytes, " (",
                                                   oneshot::kChunkBytes, "..", kMaxBytesLimit, ")"));
  }
  if (options.max_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("one-shot all-reduce: max_blocks ", options.max_blocks));
  }
  if (options.timeout.count() <= 0 || options.init_timeout.count() <= 0) {
    return absl::InvalidArgumentError("one-shot all-reduce: timeouts must be positive");
  }
  auto comm = std::make_unique<P2pAllReduceCommunicator>(options, std::move(inner));
  EXL3_RETURN_IF_ERROR(comm->init(store));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace exl3
