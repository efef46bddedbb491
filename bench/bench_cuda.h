// CUDA runtime results as absl::Status for exl3-bench's own CUDA calls (the peaks, copy bandwidth
// and gemv modes; the backends have their own), and the device selection every GPU mode starts
// with. Built only with CUDA.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace exl3 {

// OK, or INTERNAL "<what>: <CUDA's error string>".
absl::Status cuda_status(cudaError_t err, const char* what);

// Makes `device` current after the CUDA backend's own check_cuda_device (kernels/cuda/
// cuda_backend.h: no usable device, or an index out of range, as make_cuda_backend says them).
absl::Status select_cuda_device(int device);

}  // namespace exl3
