// UploadStager: asynchronous host -> device copies through pinned staging buffers, queued on one
// stream. The caller's host memory may be reused as soon as stage() returns (its bytes are already
// in a pinned slot), and copies keep their order with everything else on the stream.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace exl3 {

class UploadStager {
 public:
  // 4 slots of 8 MiB (32 MiB pinned): filling one slot overlaps the copy out of the previous ones;
  // small uploads (a step's metadata) pack into the current slot without waiting for anything.
  static constexpr int kSlots = 4;
  static constexpr size_t kSlotBytes = size_t{8} << 20;

  UploadStager() = default;
  ~UploadStager();
  UploadStager(const UploadStager&) = delete;
  UploadStager& operator=(const UploadStager&) = delete;

  // Allocates the pinned slots and their events on the current device; INTERNAL on failure.
  absl::Status init(cudaStream_t stream);

  // Queues a copy of `bytes` from host `src` to device `dst` on the stream. A slot is refilled
  // only after its last copy finished (one event per slot), so this may wait for earlier copies.
  void stage(const void* src, void* dst, size_t bytes);

 private:
  static constexpr size_t kAlign = 256;  // each upload starts on a 256-byte boundary of its slot

  cudaStream_t stream_ = nullptr;
  uint8_t* pinned_ = nullptr;  // kSlots × kSlotBytes
  std::array<cudaEvent_t, kSlots> done_{};
  int slot_ = 0;
  size_t offset_ = 0;  // first free byte of the current slot
};

}  // namespace exl3
