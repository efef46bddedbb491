// CUDA runtime results as absl::Status for exl3-bench (bench_cuda.h).
#include "bench/bench_cuda.h"

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "kernels/cuda/cuda_backend.h"

namespace exl3 {

absl::Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

absl::Status select_cuda_device(int device) {
  EXL3_RETURN_IF_ERROR(check_cuda_device(device));
  return cuda_status(cudaSetDevice(device), "cudaSetDevice");
}

}  // namespace exl3
