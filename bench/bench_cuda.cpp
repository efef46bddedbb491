// CUDA runtime results as absl::Status for exl3-bench (bench_cuda.h).
#include "bench/bench_cuda.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

absl::Status select_cuda_device(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", cudaGetErrorString(err)));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " does not exist (", count, " visible)"));
  }
  return cuda_status(cudaSetDevice(device), "cudaSetDevice");
}

}  // namespace exl3
