// Worker device set-up: the CUDA backend and NCCL communicator (and the one-shot all-reduce over
// it) of a GPU rank (EXL3_WORKER_CUDA builds), or clear refusals in a CPU-only build.
#include "worker/service/worker_device.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

#if EXL3_WORKER_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/p2p_all_reduce_communicator.h"
#endif

namespace exl3 {

std::string default_nccl_nvls_off() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const char* value = std::getenv("NCCL_NVLS_ENABLE");
  return value == nullptr ? "" : value;
}

#if EXL3_WORKER_CUDA

namespace {

absl::Status cuda_error(cudaError_t err, int device, const char* what) {
  return absl::FailedPreconditionError(absl::StrCat("CUDA device ", device, ": ", what, " failed: ",
                                                    cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// The rank's NCCL group on the backend's stream.
NcclOptions rank_nccl_options(const RankNcclOptions& options, Backend& backend) {
  NcclOptions o;
  o.rank = options.rank;
  o.world_size = options.world_size;
  o.device = options.device;
  o.stream = cuda_stream_of(backend);
  o.prefix = options.prefix;
  o.timeout = options.timeout;
  o.init_timeout = options.init_timeout;
  // Collectives return once queued; the model flushes them once per step (Communicator::flush),
  // so a step has no host sync until its end.
  o.wait_each_op = false;
  return o;
}

}  // namespace

bool worker_has_cuda() { return true; }

absl::StatusOr<DeviceFacts> cuda_device_facts(int device, const std::string& cuda_visible_devices) {
  if (const absl::Status present = check_cuda_device(device); !present.ok()) {
    return absl::Status(present.code(),
                        absl::StrCat(present.message(), " (CUDA_VISIBLE_DEVICES=", cuda_visible_devices, ")"));
  }
  if (const cudaError_t err = cudaSetDevice(device); err != cudaSuccess) return cuda_error(err, device, "cudaSetDevice");
  cudaDeviceProp prop{};
  if (const cudaError_t err = cudaGetDeviceProperties(&prop, device); err != cudaSuccess) {
    return cuda_error(err, device, "cudaGetDeviceProperties");
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes); err != cudaSuccess) {
    return cuda_error(err, device, "cudaMemGetInfo");
  }
  DeviceFacts f;
  f.name = absl::StrCat("cuda:", device, " ", prop.name);
  f.total_bytes = static_cast<int64_t>(total_bytes);
  f.free_bytes = static_cast<int64_t>(free_bytes);
  return f;
}

absl::StatusOr<std::shared_ptr<Backend>> make_rank_cuda_backend(int rank, int device, uint64_t cap_bytes,
                                                                Int8Activations int8_activations) {
  CudaBackendOptions o;
  o.device = device;
  o.cap_bytes = cap_bytes;
  o.int8_activations = int8_activations;
  o.label = absl::StrCat("rank ", rank);
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_cuda_backend(o));
  return std::shared_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Communicator>> make_rank_nccl_communicator(const RankNcclOptions& options,
                                                                          Backend& backend, RendezvousStore& store) {
  return make_nccl_communicator(rank_nccl_options(options, backend), store);
}

absl::StatusOr<std::unique_ptr<Communicator>> make_rank_oneshot_communicator(const RankNcclOptions& options,
                                                                             int64_t max_bytes, Backend& backend,
                                                                             std::unique_ptr<Communicator> nccl,
                                                                             RendezvousStore& store) {
  return make_p2p_all_reduce_communicator(p2p_all_reduce_options_of(rank_nccl_options(options, backend), max_bytes),
                                          std::move(nccl), store);
}

MeasuredDeviceMemory measure_cuda_memory(Backend& backend) {
  const DeviceMemoryReport r = device_memory_report(backend);
  MeasuredDeviceMemory m;
  m.used_bytes = r.device_used_bytes;
  m.total_bytes = r.device_total_bytes;
  m.allocated_bytes = r.backend_bytes;
  m.cap_bytes = r.cap_bytes;
  m.text = r.to_string();
  return m;
}

#else  // !EXL3_WORKER_CUDA

bool worker_has_cuda() { return false; }

absl::StatusOr<DeviceFacts> cuda_device_facts(int, const std::string&) {
  return absl::FailedPreconditionError(kNoCudaMessage);
}

absl::StatusOr<std::shared_ptr<Backend>> make_rank_cuda_backend(int, int, uint64_t, Int8Activations) {
  return absl::FailedPreconditionError(kNoCudaMessage);
}

absl::StatusOr<std::unique_ptr<Communicator>> make_rank_nccl_communicator(const RankNcclOptions&, Backend&,
                                                                          RendezvousStore&) {
  return absl::FailedPreconditionError(kNoCudaMessage);
}

absl::StatusOr<std::unique_ptr<Communicator>> make_rank_oneshot_communicator(const RankNcclOptions&, int64_t,
                                                                             Backend&, std::unique_ptr<Communicator>,
                                                                             RendezvousStore&) {
  return absl::FailedPreconditionError(kNoCudaMessage);
}

MeasuredDeviceMemory measure_cuda_memory(Backend&) { return MeasuredDeviceMemory{}; }

#endif

}  // namespace exl3
