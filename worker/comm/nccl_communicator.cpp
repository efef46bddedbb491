// NCCL backend of the Communicator: a non-blocking NCCL communicator made through the rendezvous
// store, every wait polled against a deadline, ncclCommAbort on the first error or timeout.
#include "worker/comm/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <nccl.h>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "worker/comm/collective_args.h"
#include "worker/comm/scoped_device.h"

namespace exl3 {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// ---- small helpers --------------------------------------------------------------------------------

// Pauses between polls. A small collective takes about 10 us on NVLink (docs/hardware.md), so the
// first 100 us only yield; after that sleeps double from 20 us up to 1 ms, which keeps an idle
// wait cheap without adding more than a millisecond to one that ends late.
class Backoff {
 public:
  void pause() {
    if (Clock::now() - start_ < microseconds(100)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, microseconds(1000));
  }

 private:
  const Clock::time_point start_ = Clock::now();
  microseconds sleep_{20};
};

std::optional<ncclDataType_t> nccl_type(DType dtype, bool allow_i32) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return allow_i32 ? std::optional<ncclDataType_t>(ncclInt32) : std::nullopt;
    default: return std::nullopt;
  }
}

const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult?";
  }
}

// An argument NCCL refused is a hole in our own checks (INTERNAL); every other NCCL error means
// the group can no longer talk (a peer or the network gone, a transport failure).
absl::StatusCode code_of(ncclResult_t result) {
  return result == ncclInvalidArgument || result == ncclInvalidUsage
             ? absl::StatusCode::kInternal
             : absl::StatusCode::kUnavailable;
}

// NCCL reads NCCL_NVLS_ENABLE once per process, at the first communicator, so the default is put
// in place before any NCCL call of this process and checked on every later one.
absl::Status keep_nvls_off(bool allow_nvls) {
  static const std::string found = [] {
    const char* value = std::getenv("NCCL_NVLS_ENABLE");
    if (value != nullptr) return std::string(value);
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    return std::string("0");
  }();
  if (found == "0" || allow_nvls) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "NCCL: NCCL_NVLS_ENABLE=", found, " in the environment, but NVLink multicast must stay "
      "off (unset it or set it to 0; NcclOptions::allow_nvls lets it through)"));
}

// What one operation is, for messages; formatted only when something fails.
struct OpInfo {
  const char* op;
  int64_t count = 0;
  DType dtype = DType::kI32;
  const char* peer_role = nullptr;  // "to rank", "from rank", "from root"
  int peer = -1;
};

std::string describe(const OpInfo& info) {
  std::string text = info.count > 0
                         ? absl::StrCat(info.op, " of ", info.count, " ", dtype_name(info.dtype))
                         : std::string(info.op);
  if (info.peer_role != nullptr) absl::StrAppend(&text, " ", info.peer_role, " ", info.peer);
  return text;
}

// ---- the communicator ---------------------------------------------------------------------------

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(NcclOptions options) : options_(std::move(options)) {}
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override;

  // Allocates the event and the barrier word, creates the NCCL communicator from `id` and warms
  // it up, all before `deadline`. Runs with options_.device current.
  absl::Status init(const ncclUniqueId& id, Clock::time_point deadline);

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  absl::Status all_reduce_sum(std::span<float>) override { return host_spans("all_reduce_sum"); }
  absl::Status all_gather(std::span<const float>, std::span<float>,
                          std::span<const int64_t>) override {
    return host_spans("all_gather");
  }
  absl::Status broadcast(std::span<float>, int) override { return host_spans("broadcast"); }
  absl::Status send(std::span<const float>, int) override { return host_spans("send"); }
  absl::Status recv(std::span<float>, int) override { return host_spans("recv"); }

  absl::Status barrier() override {
    const OpInfo info{"barrier", 1, DType::kI32};
    return run(info, options_.timeout, [&] {
      return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_,
                           options_.stream);
    });
  }

  absl::Status flush() override {
    EXL3_RETURN_IF_ERROR(usable());
    if (options_.wait_each_op) return absl::OkStatus();
    const OpInfo info{"flush (the step's collectives)", 0, DType::kI32};
    ScopedDevice device;
    if (absl::Status status = device.enter(options_.device); !status.ok()) {
      return fail(absl::Status(status.code(), absl::StrCat(describe(info), " (", who(), "): ", status.message())));
    }
    const cudaError_t err = cudaEventRecord(done_, options_.stream);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return fail(cuda_error(info, "cudaEventRecord", err));
    }
    return wait_done(info, Clock::now() + options_.timeout, options_.timeout);
  }

  // Without wait_each_op a collective is only enqueued on the stream (its wait is flush()'s).
  bool supports_graph_capture() const override { return !options_.wait_each_op; }

  absl::Status all_reduce_sum(Tensor& t) override {
    EXL3_RETURN_IF_ERROR(check_tensor(t, "all_reduce_sum", /*allow_i32=*/false));
    if (t.numel() == 0) return usable();
    const OpInfo info{"all_reduce_sum", t.numel(), t.dtype()};
    const ncclDataType_t type = *nccl_type(t.dtype(), false);
    return run(info, options_.timeout, [&] {
      return ncclAllReduce(t.raw(), t.mutable_raw(), static_cast<size_t>(t.numel()), type, ncclSum,
                           comm_, options_.stream);
    });
  }

  absl::Status all_gather(const Tensor& send, Tensor& recv,
                          std::span<const int64_t> counts) override;

  absl::Status broadcast(Tensor& t, int root) override {
    EXL3_RETURN_IF_ERROR(check_root(root, world_size()));
    EXL3_RETURN_IF_ERROR(check_tensor(t, "broadcast", /*allow_i32=*/true));
    if (t.numel() == 0) return usable();
    const OpInfo info{"broadcast", t.numel(), t.dtype(), "from root", root};
    const ncclDataType_t type = *nccl_type(t.dtype(), true);
    return run(info, options_.timeout, [&] {
      return ncclBroadcast(t.raw(), t.mutable_raw(), static_cast<size_t>(t.numel()), type, root,
                           comm_, options_.stream);
    });
  }

  absl::Status send(const Tensor& t, int dst_rank) override {
    EXL3_RETURN_IF_ERROR(check_peer("send", rank(), world_size(), dst_rank));
    EXL3_RETURN_IF_ERROR(check_tensor(t, "send", /*allow_i32=*/true));
    if (t.numel() == 0) return usable();
    const OpInfo info{"send", t.numel(), t.dtype(), "to rank", dst_rank};
    const ncclDataType_t type = *nccl_type(t.dtype(), true);
    return run(info, options_.timeout, [&] {
      return ncclSend(t.raw(), static_cast<size_t>(t.numel()), type, dst_rank, comm_,
                      options_.stream);
    });
  }

  absl::Status recv(Tensor& t, int src_rank) override {
    EXL3_RETURN_IF_ERROR(check_peer("recv", rank(), world_size(), src_rank));
    EXL3_RETURN_IF_ERROR(check_tensor(t, "recv", /*allow_i32=*/true));
    if (t.numel() == 0) return usable();
    const OpInfo info{"recv", t.numel(), t.dtype(), "from rank", src_rank};
    const ncclDataType_t type = *nccl_type(t.dtype(), true);
    return run(info, options_.timeout, [&] {
      return ncclRecv(t.mutable_raw(), static_cast<size_t>(t.numel()), type, src_rank, comm_,
                      options_.stream);
    });
  }

 private:
  std::string who() const {
    return absl::StrCat("NCCL rank ", options_.rank, " of ", options_.world_size, " on device ",
                        options_.device, ", store prefix '", options_.prefix, "'");
  }

  absl::Status host_spans(const char* op) const {
    return absl::UnimplementedError(absl::StrCat(
        op, ": the NCCL communicator takes CUDA tensors; host data goes through Gloo"));
  }

  absl::Status usable() const {
    if (failed_.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("communicator unusable after an earlier error: ", failed_.message()));
  }

  absl::Status check_tensor(const Tensor& t, const char* op, bool allow_i32) const;

  // Enqueues one operation (`enqueue` returns NCCL's result) and waits for it, all within
  // `timeout` from now. The first failure aborts the communicator and is kept.
  template <typename Enqueue>
  absl::Status run(const OpInfo& info, milliseconds timeout, Enqueue&& enqueue) {
    EXL3_RETURN_IF_ERROR(usable());
    const Clock::time_point deadline = Clock::now() + timeout;
    ScopedDevice device;
    if (absl::Status status = device.enter(options_.device); !status.ok()) {
      return fail(absl::Status(status.code(), absl::StrCat(describe(info), " (", who(), "): ",
                                                           status.message())));
    }
    const ncclResult_t result = enqueue();
    if (result != ncclSuccess && result != ncclInProgress) {
      return fail(nccl_error(info, "enqueueing", result));
    }
    EXL3_RETURN_IF_ERROR(wait_enqueued(info, deadline, timeout, "NCCL did not issue it"));
    if (!options_.wait_each_op) return absl::OkStatus();
    const cudaError_t err = cudaEventRecord(done_, options_.stream);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return fail(cuda_error(info, "cudaEventRecord", err));
    }
    return wait_done(info, deadline, timeout);
  }

  // Polls NCCL's state until what was issued so far is done on the host side (ncclSuccess): the
  // operations enqueued on the stream, or the communicator set up. `late` says what a timeout means.
  absl::Status wait_enqueued(const OpInfo& info, Clock::time_point deadline,
                             milliseconds timeout, const char* late) {
    Backoff backoff;
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
      if (result != ncclSuccess) return fail(nccl_error(info, "querying", result));
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) return fail(nccl_error(info, "issuing", state));
      if (Clock::now() >= deadline) return fail(timed_out(info, late, timeout));
      backoff.pause();
    }
  }

  // Polls the event recorded after the operation, and NCCL's state, until the operation is done.
  absl::Status wait_done(const OpInfo& info, Clock::time_point deadline, milliseconds timeout) {
    Backoff backoff;
    while (true) {
      const cudaError_t err = cudaEventQuery(done_);
      if (err == cudaSuccess) return absl::OkStatus();
      if (err != cudaErrorNotReady) {
        cudaGetLastError();
        return fail(cuda_error(info, "the stream", err));
      }
      // "Not ready" is no error; make sure it is not left behind as the thread's last error,
      // where the next EXL3_CUDA_CHECK_LAUNCH would find it.
      if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
      ncclResult_t state = ncclSuccess;
      const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
      if (result != ncclSuccess) return fail(nccl_error(info, "querying", result));
      if (state != ncclSuccess && state != ncclInProgress) {
        return fail(nccl_error(info, "running", state));
      }
      if (Clock::now() >= deadline) {
        return fail(timed_out(info, "it did not complete (a peer did not take part, or is stuck)",
                              timeout));
      }
      backoff.pause();
    }
  }

  absl::Status nccl_error(const OpInfo& info, const char* stage, ncclResult_t result) const {
    const char* detail = ncclGetLastError(comm_);
    return absl::Status(
        code_of(result),
        absl::StrCat(describe(info), " (", who(), "): NCCL error while ", stage, ": ",
                     nccl_result_name(result), ", ", ncclGetErrorString(result),
                     detail != nullptr && detail[0] != '\0' ? absl::StrCat(" (", detail, ")") : "",
                     "; communicator aborted"));
  }

  absl::Status cuda_error(const OpInfo& info, const char* where, cudaError_t err) const {
    return absl::InternalError(absl::StrCat(describe(info), " (", who(), "): CUDA error from ",
                                            where, ": ", cudaGetErrorName(err), ", ",
                                            cudaGetErrorString(err), "; communicator aborted"));
  }

  absl::Status timed_out(const OpInfo& info, const char* what, milliseconds timeout) const {
    return absl::DeadlineExceededError(absl::StrCat(describe(info), " (", who(), "): ", what,
                                                    " within ", timeout.count(),
                                                    " ms; communicator aborted"));
  }

  // Aborts the NCCL communicator (which also stops its kernels still waiting on peers) and keeps
  // `status` as the reason every later call fails.
  absl::Status fail(absl::Status status) {
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    failed_ = status;
    return status;
  }

  const NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  int32_t* barrier_word_ = nullptr;  // device int the barrier and the warm-up all-reduce
  absl::Status failed_;
};

absl::Status NcclCommunicator::check_tensor(const Tensor& t, const char* op,
                                            bool allow_i32) const {
  if (t.defined() && t.numel() == 0) return absl::OkStatus();
  if (!t.defined() || t.device() != Device::kCuda || !nccl_type(t.dtype(), allow_i32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the NCCL communicator takes CUDA tensors of F32, F16 or BF16",
        allow_i32 ? " or I32" : "", ", not ",
        t.defined() ? absl::StrCat(device_name(t.device()), " ", dtype_name(t.dtype()))
                    : std::string("an undefined tensor")));
  }
  // A CUDA tensor must also be memory of this communicator's device (one process may drive
  // several devices, and a wrapped host pointer would crash the kernel).
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, t.raw());
  if (err != cudaSuccess) cudaGetLastError();
  const bool device_memory = err == cudaSuccess && (attributes.type == cudaMemoryTypeDevice ||
                                                    attributes.type == cudaMemoryTypeManaged);
  if (!device_memory) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the tensor is marked cuda but its data is not device memory"));
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != options_.device) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the tensor lives on device ",
                                                   attributes.device, ", the communicator on ",
                                                   options_.device));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::all_gather(const Tensor& send, Tensor& recv,
                                          std::span<const int64_t> counts) {
  const int64_t sent = send.defined() ? send.numel() : 0;
  const int64_t received = recv.defined() ? recv.numel() : 0;
  EXL3_RETURN_IF_ERROR(check_all_gather_counts(rank(), world_size(), sent, received, counts));
  const int64_t total = received;
  if (total == 0) return usable();
  EXL3_RETURN_IF_ERROR(check_tensor(recv, "all_gather", /*allow_i32=*/false));
  if (sent > 0) {
    EXL3_RETURN_IF_ERROR(check_tensor(send, "all_gather", /*allow_i32=*/false));
    if (send.dtype() != recv.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("all_gather: sends ", dtype_name(send.dtype()),
                                                     " into ", dtype_name(recv.dtype())));
    }
  }

  const ncclDataType_t type = *nccl_type(recv.dtype(), false);
  const size_t element = dtype_size(recv.dtype());
  char* out = static_cast<char*>(recv.mutable_raw());
  const bool even = std::all_of(counts.begin(), counts.end(),
                                [&](int64_t c) { return c == counts.front(); });
  const OpInfo info{"all_gather", total, recv.dtype()};
  if (even) {
    return run(info, options_.timeout, [&] {
      return ncclAllGather(send.raw(), out, static_cast<size_t>(counts.front()), type, comm_,
                           options_.stream);
    });
  }
  // Uneven counts: one broadcast per rank, each into its place in `recv`, issued as one group
  // (NCCL runs them together). Ranks that send nothing are skipped on every rank alike.
  return run(info, options_.timeout, [&] {
    ncclResult_t result = ncclGroupStart();
    if (result != ncclSuccess) return result;
    size_t offset = 0;
    for (int r = 0; r < world_size(); ++r) {
      const size_t count = static_cast<size_t>(counts[r]);
      if (count == 0) continue;
      char* place = out + offset * element;
      const void* source = r == rank() ? send.raw() : place;
      result = ncclBroadcast(source, place, count, type, r, comm_, options_.stream);
      if (result != ncclSuccess && result != ncclInProgress) break;
      offset += count;
    }
    const ncclResult_t end = ncclGroupEnd();
    return result != ncclSuccess && result != ncclInProgress ? result : end;
  });
}

absl::Status NcclCommunicator::init(const ncclUniqueId& id, Clock::time_point deadline) {
  const OpInfo info{"init", 0, DType::kI32};
  cudaError_t err = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaMalloc(&barrier_word_, sizeof(int32_t));
  if (err == cudaSuccess) err = cudaMemset(barrier_word_, 0, sizeof(int32_t));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(cuda_error(info, "allocation", err));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = options_.prefix.c_str();
  const ncclResult_t result = ncclCommInitRankConfig(&comm_, options_.world_size, id,
                                                     options_.rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return fail(nccl_error(info, "creating the communicator", result));
  }
  EXL3_RETURN_IF_ERROR(wait_enqueued(info, deadline, options_.init_timeout,
                                     "NCCL set-up did not finish (a rank did not join, or is stuck)"));
  // The warm-up: NCCL connects its channels at the first collective, so the first all-reduce
  // costs milliseconds; pay it here, within the init deadline, rather than in the first step.
  const OpInfo warm_up{"warm-up all_reduce_sum", 1, DType::kI32};
  const milliseconds left = std::max(
      std::chrono::duration_cast<milliseconds>(deadline - Clock::now()), milliseconds(1));
  return run(warm_up, left, [&] {
    return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_,
                         options_.stream);
  });
}

NcclCommunicator::~NcclCommunicator() {
  ScopedDevice device;
  const bool on_device = device.enter(options_.device).ok();
  if (comm_ != nullptr) {
    // Finalizing flushes this rank's outstanding work; it is polled like any other wait, and a
    // communicator that does not finish in time is aborted instead of destroyed.
    bool finalized = false;
    const ncclResult_t result = ncclCommFinalize(comm_);
    if (result == ncclSuccess || result == ncclInProgress) {
      const Clock::time_point deadline = Clock::now() + options_.timeout;
      Backoff backoff;
      while (true) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state == ncclSuccess) {
          finalized = true;
          break;
        }
        if (state != ncclInProgress || Clock::now() >= deadline) break;
        backoff.pause();
      }
    }
    if (finalized) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (on_device) {
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (barrier_word_ != nullptr) cudaFree(barrier_word_);
    cudaGetLastError();
  }
}

// Rank 0 makes the unique id and publishes it; the others wait for it until `deadline`.
absl::StatusOr<ncclUniqueId> exchange_id(const NcclOptions& options, RendezvousStore& store,
                                         Clock::time_point deadline, const std::string& who) {
  const std::string key = absl::StrCat(options.prefix, "/nccl_id");
  ncclUniqueId id;
  if (options.rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat(who, ": ncclGetUniqueId failed: ",
                                                 ncclGetErrorString(result), " (",
                                                 ncclGetLastError(nullptr), ")"));
    }
    const std::vector<char> bytes(id.internal, id.internal + sizeof(id.internal));
    const absl::Status status = store.set(key, bytes);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(who, ": publishing the NCCL id under '", key,
                                                      "': ", status.message()));
    }
    return id;
  }
  const milliseconds left = std::max(
      std::chrono::duration_cast<milliseconds>(deadline - Clock::now()), milliseconds(1));
  auto values = store.get({key}, left);
  if (!values.ok()) {
    return absl::Status(values.status().code(),
                        absl::StrCat(who, ": waiting for rank 0's NCCL id: ",
                                     values.status().message()));
  }
  const std::vector<char>& bytes = values->front();
  if (bytes.size() != sizeof(id.internal)) {
    return absl::InternalError(absl::StrCat(who, ": the NCCL id under '", key, "' holds ",
                                            bytes.size(), " bytes, not ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions& options,
                                                                     RendezvousStore& store) {
  const Clock::time_point deadline = Clock::now() + options.init_timeout;
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL: rank ", options.rank,
                                                   " is outside a world of ", options.world_size));
  }
  if (options.timeout <= milliseconds::zero() || options.init_timeout <= milliseconds::zero()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL: timeouts must be positive, got ", options.timeout.count(), " ms and init ",
        options.init_timeout.count(), " ms"));
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("NCCL: the store key prefix is empty");
  }
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL: no usable CUDA device: ", cudaGetErrorName(err), ", ", cudaGetErrorString(err)));
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL: device ", options.device,
                                                   " is outside the ", devices,
                                                   " CUDA devices of this process"));
  }
  EXL3_RETURN_IF_ERROR(keep_nvls_off(options.allow_nvls));
  const std::string who = absl::StrCat("NCCL rank ", options.rank, " of ", options.world_size,
                                       " on device ", options.device, " (store prefix '",
                                       options.prefix, "')");

  ScopedDevice device;
  EXL3_RETURN_IF_ERROR(device.enter(options.device));
#if CUDART_VERSION >= 12080
  if (options.stream != nullptr) {
    int stream_device = -1;
    if (cudaStreamGetDevice(options.stream, &stream_device) == cudaSuccess &&
        stream_device != options.device) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": the stream belongs to device ",
                                                     stream_device));
    }
    cudaGetLastError();
  }
#endif

  EXL3_ASSIGN_OR_RETURN(const ncclUniqueId id, exchange_id(options, store, deadline, who));
  auto comm = std::make_unique<NcclCommunicator>(options);
  EXL3_RETURN_IF_ERROR(comm->init(id, deadline));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace exl3
