// DeviceAllocator: capped, counted cudaMalloc (see device_allocator.h).
#include "kernels/cuda/device_allocator.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace exl3 {

struct DeviceAllocator::State {
  std::atomic<uint64_t> allocated{0};
};

std::string describe_bytes(uint64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  constexpr double kGiB = kMiB * 1024.0;
  if (bytes >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB (%u bytes)", bytes / kGiB, bytes);
  return absl::StrFormat("%.2f MiB (%u bytes)", bytes / kMiB, bytes);
}

DeviceAllocator::DeviceAllocator(std::string label, uint64_t cap_bytes)
    : label_(std::move(label)), cap_bytes_(cap_bytes), state_(std::make_shared<State>()) {}

uint64_t DeviceAllocator::allocated_bytes() const { return state_->allocated.load(); }

absl::StatusOr<std::shared_ptr<void>> DeviceAllocator::allocate(uint64_t bytes, const std::string& what) {
  // Reserve the bytes first (compare-and-swap), so concurrent callers cannot both pass the cap.
  uint64_t current = state_->allocated.load();
  do {
    if (cap_bytes_ > 0 && current + bytes > cap_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(label_, ": allocating ", what, " (", describe_bytes(bytes), ") would exceed the cap of ",
                       describe_bytes(cap_bytes_), " with ", describe_bytes(current), " already allocated: short by ",
                       describe_bytes(current + bytes - cap_bytes_)));
    }
  } while (!state_->allocated.compare_exchange_weak(current, current + bytes));

  void* ptr = nullptr;
  if (bytes > 0) {
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err != cudaSuccess) {
      state_->allocated.fetch_sub(bytes);
      cudaGetLastError();  // an out-of-memory cudaMalloc is not sticky: clear it
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return absl::ResourceExhaustedError(absl::StrCat(
          label_, ": cudaMalloc of ", what, " (", describe_bytes(bytes), ") failed: ", cudaGetErrorString(err),
          "; the device has ", describe_bytes(free_bytes), " free of ", describe_bytes(total_bytes), ", ",
          describe_bytes(allocated_bytes()), " allocated through this allocator"));
    }
  }
  std::shared_ptr<State> state = state_;
  return std::shared_ptr<void>(ptr, [state, bytes](void* p) {
    if (p != nullptr) {
      const cudaError_t err = cudaFree(p);
      // A destructor cannot return the error; a fault already reported by synchronize() comes
      // back here as a sticky error, so it is printed rather than aborting the teardown.
      if (err != cudaSuccess) std::fprintf(stderr, "cudaFree failed: %s\n", cudaGetErrorString(err));
    }
    state->allocated.fetch_sub(bytes);
  });
}

}  // namespace exl3
