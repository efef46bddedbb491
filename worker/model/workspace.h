// Workspace: one arena of device memory, allocated once at load through the Backend, from which a
// forward step takes its activations and step metadata as views. reset() at the start of each
// step; the same batch shape takes the same offsets every time, so pointers are stable (a decode
// step can be captured in a CUDA graph). Running out is an error of the caller's limits, never an
// allocation.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace exl3 {

class Workspace {
 public:
  Workspace() = default;
  static absl::StatusOr<Workspace> create(Backend& backend, uint64_t bytes);
  // A workspace that holds no memory and only adds up what is taken (take() returns undefined
  // tensors): sizes a real one from the same sequence of takes.
  static Workspace counter();

  void reset() { used_ = 0; }
  // A view of `shape` (contents undefined). RESOURCE_EXHAUSTED names `what` and the shortfall.
  absl::StatusOr<Tensor> take(DType dtype, const Shape& shape, const char* what);
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }

  // Bytes one take() of this size consumes (with alignment).
  static uint64_t aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  static constexpr uint64_t kAlign = 256;
  Tensor arena_;
  bool counting_ = false;
  uint64_t capacity_ = 0;
  uint64_t used_ = 0;
};

}  // namespace exl3
