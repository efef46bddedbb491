// UploadStager: pinned, event-guarded staging ring for host -> device uploads (see upload_stager.h).
#include "kernels/cuda/upload_stager.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.cuh"

namespace exl3 {

UploadStager::~UploadStager() {
  // The owner synchronised its stream first; nothing is in flight from these slots.
  for (cudaEvent_t e : done_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
}

absl::Status UploadStager::init(cudaStream_t stream) {
  stream_ = stream;
  cudaError_t err = cudaHostAlloc(reinterpret_cast<void**>(&pinned_), kSlots * kSlotBytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    pinned_ = nullptr;
    return absl::InternalError(absl::StrCat("cudaHostAlloc of ", kSlots * kSlotBytes,
                                            " bytes of upload staging failed: ", cudaGetErrorString(err)));
  }
  for (cudaEvent_t& e : done_) {
    err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      e = nullptr;
      return absl::InternalError(absl::StrCat("cudaEventCreateWithFlags failed: ", cudaGetErrorString(err)));
    }
  }
  return absl::OkStatus();
}

void UploadStager::stage(const void* src, void* dst, size_t bytes) {
  EXL3_CHECK(pinned_ != nullptr, "UploadStager used before init()");
  const auto* from = static_cast<const uint8_t*>(src);
  auto* to = static_cast<uint8_t*>(dst);
  while (bytes > 0) {
    if (offset_ >= kSlotBytes) {
      slot_ = (slot_ + 1) % kSlots;
      EXL3_CUDA_CHECK(cudaEventSynchronize(done_[slot_]));  // the slot's last copy has finished
      offset_ = 0;
    }
    const size_t n = std::min(bytes, kSlotBytes - offset_);
    uint8_t* staged = pinned_ + slot_ * kSlotBytes + offset_;
    std::memcpy(staged, from, n);
    EXL3_CUDA_CHECK(cudaMemcpyAsync(to, staged, n, cudaMemcpyHostToDevice, stream_));
    EXL3_CUDA_CHECK(cudaEventRecord(done_[slot_], stream_));
    offset_ = std::min(kSlotBytes, (offset_ + n + kAlign - 1) / kAlign * kAlign);
    from += n;
    to += n;
    bytes -= n;
  }
}

}  // namespace exl3
