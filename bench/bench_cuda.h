// CUDA runtime results as absl::Status for exl3-bench's own CUDA calls (the peaks, copy bandwidth
// and gemv modes; the backends have their own), and the device selection every GPU mode starts
// with. Built only with CUDA.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace exl3 {

// OK, or INTERNAL "<what>: <CUDA's error string>".
absl::Status cuda_status(cudaError_t err, const char* what);

// Makes `device` current: FAILED_PRECONDITION "no usable CUDA device: ..." when the runtime finds
// none (no GPU, no driver, a driver older than the runtime), INVALID_ARGUMENT "CUDA device N does
// not exist (M visible)" when it is not one of the visible devices.
absl::Status select_cuda_device(int device);

}  // namespace exl3
