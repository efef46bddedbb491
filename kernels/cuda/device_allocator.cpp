// DeviceAllocator: capped, counted cudaMalloc (see device_allocator.h).
#include "kernels/cuda/device_allocator.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/check.h"

namespace exl3 {

struct DeviceAllocator::State {
  std::atomic<uint64_t> allocated{0};   // unpooled live bytes
  std::atomic<uint64_t> pooled{0};      // requested bytes of live pooled allocations
  std::shared_ptr<void> pool;           // the block (freed with the state)
  uint64_t pool_size = 0, pool_next = 0;
};

std::string describe_bytes(uint64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  constexpr double kGiB = kMiB * 1024.0;
  if (bytes >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB (%u bytes)", bytes / kGiB, bytes);
  return absl::StrFormat("%.2f MiB (%u bytes)", bytes / kMiB, bytes);
}

DeviceAllocator::DeviceAllocator(std::string label, uint64_t cap_bytes)
    : label_(std::move(label)), cap_bytes_(cap_bytes), state_(std::make_shared<State>()) {}

uint64_t DeviceAllocator::allocated_bytes() const { return state_->allocated.load() + state_->pooled.load(); }
uint64_t DeviceAllocator::committed_bytes() const { return state_->allocated.load() + state_->pool_size; }
uint64_t DeviceAllocator::pool_bytes() const { return state_->pool_size; }

absl::Status DeviceAllocator::reserve_pool(uint64_t bytes, const std::string& what) {
  if (state_->pool) return absl::InvalidArgumentError(absl::StrCat(label_, ": a device pool is already reserved"));
  EXL3_ASSIGN_OR_RETURN(std::shared_ptr<void> block, allocate(bytes, what));
  // The block is counted through pool_size from now on, not as an ordinary allocation.
  state_->allocated.fetch_sub(bytes);
  state_->pool = std::move(block);
  state_->pool_size = bytes;
  state_->pool_next = 0;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<void>> DeviceAllocator::allocate(uint64_t bytes, const std::string& what) {
  // Long-lived tensors are carved from the pool while it has room (single-threaded use: the
  // backend is driven by one thread).
  if (state_->pool && bytes > 0 && state_->pool_next + bytes <= state_->pool_size) {
    void* ptr = static_cast<uint8_t*>(state_->pool.get()) + state_->pool_next;
    state_->pool_next = (state_->pool_next + bytes + 255) / 256 * 256;
    state_->pooled.fetch_add(bytes);
    std::shared_ptr<State> state = state_;
    return std::shared_ptr<void>(ptr, [state, bytes](void*) { state->pooled.fetch_sub(bytes); });
  }
  // Reserve the bytes first (compare-and-swap), so concurrent callers cannot both pass the cap.
  uint64_t current = state_->allocated.load();
  do {
    if (cap_bytes_ > 0 && current + state_->pool_size + bytes > cap_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(label_, ": allocating ", what, " (", describe_bytes(bytes), ") would exceed the cap of ",
                       describe_bytes(cap_bytes_), " with ", describe_bytes(current + state_->pool_size),
                       " already allocated: short by ", describe_bytes(current + state_->pool_size + bytes - cap_bytes_)));
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
