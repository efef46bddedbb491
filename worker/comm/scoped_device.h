// ScopedDevice: makes a CUDA device current for a scope and restores the caller's device after
// it, so that a communicator can be driven from a thread whose current device is another one.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace exl3 {

class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (entered_ && previous_ != device_) cudaSetDevice(previous_);
  }

  absl::Status enter(int device) {
    cudaError_t err = cudaGetDevice(&previous_);
    if (err == cudaSuccess && previous_ != device) err = cudaSetDevice(device);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(
          absl::StrCat("cannot make CUDA device ", device, " current: ", cudaGetErrorName(err), ", ",
                       cudaGetErrorString(err)));
    }
    device_ = device;
    entered_ = true;
    return absl::OkStatus();
  }

 private:
  int previous_ = 0;
  int device_ = 0;
  bool entered_ = false;
};

}  // namespace exl3
