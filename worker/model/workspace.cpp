// Workspace arena: bump allocation of aligned views.
#include "worker/model/workspace.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::StatusOr<Workspace> Workspace::create(Backend& backend, uint64_t bytes) {
  Workspace w;
  EXL3_ASSIGN_OR_RETURN(w.arena_, backend.allocate(DType::kU8, {static_cast<int64_t>(std::max<uint64_t>(bytes, kAlign))},
                                                   "forward workspace"));
  w.capacity_ = static_cast<uint64_t>(w.arena_.numel());
  return w;
}

Workspace Workspace::counter() {
  Workspace w;
  w.counting_ = true;
  return w;
}

absl::StatusOr<Tensor> Workspace::take(DType dtype, const Shape& shape, const char* what) {
  const uint64_t bytes = aligned(static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype));
  if (counting_) {
    used_ += bytes;
    return Tensor();
  }
  if (used_ + bytes > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat("forward workspace: ", what, " ", shape_string(shape), " needs ",
                                                     bytes, " bytes, ", capacity_ - used_, " of ", capacity_,
                                                     " left (the step exceeds the limits the model was loaded for)"));
  }
  Tensor t = arena_.view_bytes(static_cast<int64_t>(used_), dtype, shape);
  used_ += bytes;
  return t;
}

}  // namespace exl3
