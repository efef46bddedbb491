// Opting a kernel into more than the default 48 KiB of dynamic shared memory, once per device (the
// attribute belongs to the device's context) rather than at every launch.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_check.cuh"

namespace exl3 {

// Lets kKernel use `bytes` of dynamic shared memory on the current device. Each kernel keeps its
// own record (bit d for device d) of where that was done; every call for one kernel asks the same
// bytes.
template <auto kKernel>
void allow_shared_bytes(size_t bytes) {
  static std::atomic<uint64_t> devices_allowed{0};
  int device = 0;
  EXL3_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (devices_allowed.load(std::memory_order_acquire) & bit) != 0) return;
  EXL3_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  devices_allowed.fetch_or(bit, std::memory_order_release);
}

}  // namespace exl3
