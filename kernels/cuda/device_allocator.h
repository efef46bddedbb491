// DeviceAllocator: the one door to cudaMalloc for a CUDA backend. Every device allocation is
// counted against a hard cap; a refusal is RESOURCE_EXHAUSTED naming the owner (e.g. "rank 1"),
// what was being allocated, its size, the cap, what is already allocated and the shortfall.
// Allocations are freed when the last shared_ptr to them goes away, which may be after the
// allocator itself is gone (the count lives in shared state). Freeing is cudaFree, which waits for
// the device, so dropping a tensor that queued work still reads is safe (but slow: the forward pass
// works in arenas allocated once, not in per-step allocations).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace exl3 {

// "1.50 GiB (1610612736 bytes)": sizes in allocator messages.
std::string describe_bytes(uint64_t bytes);

class DeviceAllocator {
 public:
  // label prefixes every message ("rank 1", "cuda:0"); cap_bytes 0 = no cap.
  DeviceAllocator(std::string label, uint64_t cap_bytes);

  // `bytes` of device memory on the current CUDA device (not zeroed), freed with cudaFree when the
  // returned pointer's last copy is released. 0 bytes gives a non-null owner of a null pointer.
  // RESOURCE_EXHAUSTED past the cap or when cudaMalloc itself fails (the device is full).
  absl::StatusOr<std::shared_ptr<void>> allocate(uint64_t bytes, const std::string& what);

  // One block of `bytes` from which later allocations are carved (256-byte aligned) while it has
  // room. Long-lived weights and KV cache then cost their exact size
  // on the device instead of cudaMalloc's 2 MiB granularity each (~7 MiB a layer on a 70B rank).
  // The block counts against the cap as a whole from now on; carved memory is never reused (a
  // release only updates the count). At most one pool; INVALID_ARGUMENT for a second.
  absl::Status reserve_pool(uint64_t bytes, const std::string& what);

  // Live allocations, exact (requested bytes; pooled ones included at their requested size).
  uint64_t allocated_bytes() const;
  // What counts against the cap: unpooled live allocations plus the whole pool block.
  uint64_t committed_bytes() const;
  uint64_t pool_bytes() const;
  uint64_t cap_bytes() const { return cap_bytes_; }
  const std::string& label() const { return label_; }

 private:
  struct State;
  std::string label_;
  uint64_t cap_bytes_;
  std::shared_ptr<State> state_;
};

}  // namespace exl3
