// The CUDA backend (kernels/backend.h on one GPU): F16 activations and KV cache, EXL3 linears kept
// as trellis and decoded on the fly, dense linears F16 through cuBLAS. One non-blocking stream per
// backend carries every op, upload and download, in call order; every device allocation goes
// through a capped DeviceAllocator. Not thread-safe: one rank thread drives one backend; memory
// calls select the backend's device, ops assume it is current on the calling thread (a launch on
// another device's stream fails loudly).
//
// reserve_scratch(max_rows, max_features) reserves the EXL3 linear scratch (F16 and F32 [max_rows,
// max_features]) and the attention split-K scratch, sized for any heads · head_dim <= max_features
// (q_proj's outputs are among the features) with head_dim <= 128 (launch_attention's contract).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace exl3 {

struct CudaBackendOptions {
  int device = 0;
  uint64_t cap_bytes = 0;  // 0 = no cap
  // Workspace handed to cuBLAS (allocated through the allocator, so counted). 0 leaves cuBLAS its
  // own default workspace, which is then not counted (tests with tiny caps only).
  size_t cublas_workspace_bytes = size_t{32} << 20;
  std::string label;  // prefixes allocator messages, e.g. "rank 1"; empty = "cuda:<device>"
  // EXL3 matmuls where use_int8_activations(mode, bits, codebook, rows) holds quantize their
  // transformed input to int8 (kernels/int8_activations.h).
  Int8Activations int8_activations = Int8Activations::kOff;
};

// OK when the CUDA runtime sees a device of index `device`: FAILED_PRECONDITION "no usable CUDA
// device: ..." when it finds none (no GPU, no driver, a driver older than the runtime),
// INVALID_ARGUMENT "CUDA device N does not exist (M visible)" when the index is out of range.
absl::Status check_cuda_device(int device);

// Selects `device` for the calling thread (check_cuda_device first), creates the stream, the
// cuBLAS handle, the pinned upload staging and the workspace. INVALID_ARGUMENT for a device that
// does not exist, RESOURCE_EXHAUSTED when the cap does not even hold the workspace, INTERNAL for
// CUDA failures.
absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options);

// The stream every op of a CUDA backend is queued on (for the NCCL communicator, which must run
// its collectives in the same order). `backend` must be a CUDA backend (EXL3_CHECK).
cudaStream_t cuda_stream_of(Backend& backend);

// Device memory as the driver sees it beside what this backend counted.
struct DeviceMemoryReport {
  uint64_t device_used_bytes = 0;  // cudaMemGetInfo: total - free, every process and context
  uint64_t device_total_bytes = 0;
  uint64_t backend_bytes = 0;     // allocated_bytes() of the backend
  uint64_t cap_bytes = 0;         // 0 = no cap
  std::string to_string() const;  // one line for logs
};
DeviceMemoryReport device_memory_report(Backend& backend);

}  // namespace exl3
