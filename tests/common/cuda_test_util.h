// Helpers of the GPU tests: a device buffer that frees itself, and the check that a usable CUDA
// device exists (a GPU test fails, never skips, on a machine without one).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"

namespace exl3::testing {

// `count` elements of T on the current device (at least one, so get() is never null); errors
// abort through EXL3_CUDA_CHECK.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(std::max<size_t>(count, 1)) {
    EXL3_CUDA_CHECK(cudaMalloc(&ptr_, count_ * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  void upload(const void* src, size_t count) {
    EXL3_CHECK(count <= count_);
    EXL3_CUDA_CHECK(cudaMemcpy(ptr_, src, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const void* src) { upload(src, count_); }
  void upload(const std::vector<T>& src) { upload(src.data(), src.size()); }
  void download(void* dst, size_t count) const {
    EXL3_CHECK(count <= count_);
    EXL3_CUDA_CHECK(cudaMemcpy(dst, ptr_, count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  void download(void* dst) const { download(dst, count_); }
  std::vector<T> download(size_t count) const {
    std::vector<T> out(count);
    download(out.data(), count);
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_;
};

// CUDA devices this process sees; 0 when there is no usable driver (the error is cleared).
inline int cuda_device_count() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return devices;
}

inline void require_cuda_device() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  ASSERT_EQ(err, cudaSuccess) << "no usable CUDA device: " << cudaGetErrorString(err);
  ASSERT_GT(devices, 0) << "no CUDA device";
}

// Base of GPU test fixtures.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override { require_cuda_device(); }
};

}  // namespace exl3::testing
