// Tensor: a device, a dtype, a shape and a reference-counted byte buffer (owned, or a view into a
// mapped file, a device allocation or a workspace arena). Host accessors (data<T>()) refuse device
// tensors; device memory is reached only through a Backend (kernels/backend.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/check.h"

namespace exl3 {

enum class DType : uint8_t { kF32, kF16, kBF16, kI8, kU8, kI16, kI32, kI64, kBool };

// Where a tensor's bytes live. kCuda memory belongs to the current CUDA device of the process.
enum class Device : uint8_t { kCpu, kCuda };
const char* device_name(Device device);  // "cpu", "cuda"

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "I16"
// F32, F16 or BF16.
inline bool is_float_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}
absl::StatusOr<DType> dtype_from_name(std::string_view);  // inverse of dtype_name

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kI8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::kI16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }

using Shape = std::vector<int64_t>;
std::string shape_string(const Shape& shape);  // "[4, 32, 4096]"
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled host tensor.
  static Tensor zeros(DType dtype, Shape shape);
  // A view of `data` kept alive by `owner` (e.g. a mapped file); no copy.
  static Tensor view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner);
  // A writable view of `data` on `device` kept alive by `owner` (device allocations, arenas).
  static Tensor wrap(Device device, DType dtype, Shape shape, void* data, std::shared_ptr<const void> owner);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);

  bool defined() const { return owner_ != nullptr; }
  Device device() const { return device_; }
  bool on_host() const { return device_ == Device::kCpu; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const {
    EXL3_CHECK(i >= 0 && i < rank(), "dim ", i, " of rank-", rank(), " tensor");
    return shape_[i];
  }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return defined() ? static_cast<size_t>(numel()) * dtype_size(dtype_) : 0; }

  // Raw pointers on the tensor's own device (kernels and backends use these).
  const void* raw() const { return data_; }
  void* mutable_raw() {
    EXL3_CHECK(!read_only_, "tensor is a read-only view");
    return const_cast<void*>(data_);
  }

  // Typed host access; a device tensor is refused.
  template <typename T>
  const T* data() const {
    EXL3_CHECK(dtype_of<T>() == dtype_, "tensor is ", dtype_name(dtype_));
    EXL3_CHECK(device_ == Device::kCpu, "host access to a ", device_name(device_), " tensor");
    return static_cast<const T*>(data_);
  }
  template <typename T>
  T* mutable_data() {
    EXL3_CHECK(dtype_of<T>() == dtype_, "tensor is ", dtype_name(dtype_));
    EXL3_CHECK(device_ == Device::kCpu, "host access to a ", device_name(device_), " tensor");
    return static_cast<T*>(mutable_raw());
  }

  // Same storage, new shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Same storage: rows [begin, begin + count) along dimension 0 (contiguous, any device).
  Tensor rows(int64_t begin, int64_t count) const;
  // Same storage, reinterpreted: `dtype` `shape` starting `byte_offset` bytes in (must fit).
  Tensor view_bytes(int64_t byte_offset, DType dtype, Shape shape) const;
  // Copy with every element converted to float32 (F32, F16, BF16 and the integer types). Host only.
  Tensor to_f32() const;
  // A deep copy into new, writable host storage. Host only.
  Tensor clone() const;

 private:
  Device device_ = Device::kCpu;
  DType dtype_ = DType::kF32;
  Shape shape_;
  const void* data_ = nullptr;
  bool read_only_ = false;
  std::shared_ptr<const void> owner_;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  EXL3_CHECK_EQ(static_cast<int64_t>(values.size()), shape_numel(shape));
  Tensor t = zeros(dtype_of<T>(), std::move(shape));
  std::copy(values.begin(), values.end(), t.mutable_data<T>());
  return t;
}

}  // namespace exl3
