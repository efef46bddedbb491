// The device side of a worker rank: whether this build has the CUDA backend, what a GPU worker
// reports at registration, and (CUDA builds) the rank's CUDA backend, its NCCL communicator (with
// the one-shot P2P all-reduce over it when the job asks) and its measured device memory. In a
// build without CUDA every CUDA call returns FAILED_PRECONDITION saying so, so a GPU worker asked
// of a CPU-only build fails clearly instead of falling back.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace exl3 {

// True when this exl3-worker was built with the CUDA backend and NCCL.
bool worker_has_cuda();
// The message every CUDA entry point of a CPU-only build returns.
inline constexpr const char* kNoCudaMessage =
    "this build has no CUDA backend (exl3-worker was configured without CUDA; rebuild with -DEXL3_CUDA=ON, "
    "or run CPU workers with --backend cpu / exl3-launch --cpu-workers N)";

// Sets NCCL_NVLS_ENABLE=0 unless the environment already has it (call first in main, before any
// CUDA or NCCL call: NCCL reads it once per process) and returns the effective value.
std::string default_nccl_nvls_off();

struct DeviceFacts {
  std::string name;  // e.g. "cuda:0 NVIDIA H200"
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};
// Name (cudaGetDeviceProperties) and memory (cudaMemGetInfo) of CUDA device `device`; selects it
// on the calling thread (which creates the CUDA context). A device that is missing or unusable is
// refused (check_cuda_device) with `cuda_visible_devices`, the process's CUDA_VISIBLE_DEVICES as
// main read it, in the message.
absl::StatusOr<DeviceFacts> cuda_device_facts(int device, const std::string& cuda_visible_devices);

// A CUDA backend on `device` whose allocator may hold `cap_bytes` (0 = no cap), labelled
// "rank R" in its messages, its EXL3 matmuls using int8 activations as `int8_activations` says.
absl::StatusOr<std::shared_ptr<Backend>> make_rank_cuda_backend(int rank, int device, uint64_t cap_bytes,
                                                                Int8Activations int8_activations);

struct RankNcclOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;
  std::string prefix;  // rendezvous key prefix (one per run of the group)
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds init_timeout{60000};
};
// Joins the NCCL group on `backend`'s stream through `store`.
absl::StatusOr<std::unique_ptr<Communicator>> make_rank_nccl_communicator(const RankNcclOptions& options,
                                                                          Backend& backend, RendezvousStore& store);
// Wraps the rank's NCCL communicator `nccl` (from make_rank_nccl_communicator on the same backend)
// in the one-shot P2P all-reduce (worker/comm/p2p_all_reduce_communicator.h): all-reduces of up to
// `max_bytes` run as one kernel on `backend`'s stream, the rest through `nccl`. Same rank, world,
// device, store prefix and deadlines as the NCCL group; calls return once queued, like NCCL's.
absl::StatusOr<std::unique_ptr<Communicator>> make_rank_oneshot_communicator(const RankNcclOptions& options,
                                                                             int64_t max_bytes, Backend& backend,
                                                                             std::unique_ptr<Communicator> nccl,
                                                                             RendezvousStore& store);

// Device memory of a CUDA backend: driver view (used, total) and the backend's own count and cap.
struct MeasuredDeviceMemory {
  uint64_t used_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t cap_bytes = 0;
  std::string text;  // one line for logs
};
MeasuredDeviceMemory measure_cuda_memory(Backend& backend);

}  // namespace exl3
