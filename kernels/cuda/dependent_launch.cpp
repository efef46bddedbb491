// Whether the current device supports programmatic dependent launch, cached per device (queried
// once; launches may be inside a stream capture).
#include <array>
#include <atomic>

#include "kernels/cuda/dependent_launch.cuh"

namespace exl3 {

bool dependent_launch_supported() {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cache{};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  EXL3_CUDA_CHECK(cudaGetDevice(&device));
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int known = cache[static_cast<size_t>(device)].load(std::memory_order_relaxed);
    if (known != 0) return known == 2;
  }
  int major = 0;
  EXL3_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const bool supported = major >= 9;
  if (cacheable) cache[static_cast<size_t>(device)].store(supported ? 2 : 1, std::memory_order_relaxed);
  return supported;
}

}  // namespace exl3
