// Tensor storage, dtype names and conversions.
#include "kernels/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/fp16.h"

namespace exl3 {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kBool: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI16: return "I16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

absl::StatusOr<DType> dtype_from_name(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kU8, DType::kI16,
                  DType::kI32, DType::kI64, DType::kBool}) {
    if (dtype_name(d) == name) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype \"", std::string(name), "\""));
}

const char* device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

std::string shape_string(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  for (int64_t d : shape) EXL3_CHECK(d >= 0, "negative dimension in ", shape_string(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  const size_t bytes = std::max<size_t>(static_cast<size_t>(t.numel()) * dtype_size(dtype), 1);
  std::shared_ptr<uint8_t[]> buf(new uint8_t[bytes]());
  t.data_ = buf.get();
  t.owner_ = std::shared_ptr<const void>(buf, buf.get());
  return t;
}

Tensor Tensor::view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.read_only_ = true;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::wrap(Device device, DType dtype, Shape shape, void* data, std::shared_ptr<const void> owner) {
  for (int64_t d : shape) EXL3_CHECK(d >= 0, "negative dimension in ", shape_string(shape));
  Tensor t;
  t.device_ = device;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  EXL3_CHECK(rank() >= 1 && begin >= 0 && count >= 0 && begin + count <= shape_[0], "rows [", begin, ", ",
             begin + count, ") of ", shape_string(shape_));
  Tensor t = *this;
  const int64_t row_bytes = shape_[0] == 0 ? 0 : static_cast<int64_t>(nbytes()) / shape_[0];
  t.data_ = static_cast<const uint8_t*>(data_) + begin * row_bytes;
  t.shape_[0] = count;
  return t;
}

Tensor Tensor::view_bytes(int64_t byte_offset, DType dtype, Shape shape) const {
  const int64_t bytes = shape_numel(shape) * static_cast<int64_t>(dtype_size(dtype));
  EXL3_CHECK(byte_offset >= 0 && byte_offset + bytes <= static_cast<int64_t>(nbytes()), "view of ", bytes,
             " bytes at ", byte_offset, " in a ", nbytes(), "-byte tensor");
  Tensor t = *this;
  t.data_ = static_cast<const uint8_t*>(data_) + byte_offset;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  EXL3_CHECK_EQ(shape_numel(shape), numel(), "reshape ", shape_string(shape_), " -> ",
                shape_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  EXL3_CHECK(on_host(), "clone of a ", device_name(device_), " tensor");
  Tensor t = zeros(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(t.mutable_raw(), data_, nbytes());
  return t;
}

Tensor Tensor::to_f32() const {
  EXL3_CHECK(on_host(), "to_f32 of a ", device_name(device_), " tensor");
  Tensor out = zeros(DType::kF32, shape_);
  float* o = out.mutable_data<float>();
  const int64_t n = numel();
  auto convert = [&](auto load) {
    for (int64_t i = 0; i < n; ++i) o[i] = load(i);
  };
  switch (dtype_) {
    case DType::kF32: convert([&](int64_t i) { return static_cast<const float*>(data_)[i]; }); break;
    case DType::kF16:
      convert([&](int64_t i) { return half_bits_to_float(static_cast<const uint16_t*>(data_)[i]); });
      break;
    case DType::kBF16:
      convert([&](int64_t i) { return bf16_bits_to_float(static_cast<const uint16_t*>(data_)[i]); });
      break;
    case DType::kI8: convert([&](int64_t i) { return float(static_cast<const int8_t*>(data_)[i]); }); break;
    case DType::kU8:
    case DType::kBool:
      convert([&](int64_t i) { return float(static_cast<const uint8_t*>(data_)[i]); });
      break;
    case DType::kI16: convert([&](int64_t i) { return float(static_cast<const int16_t*>(data_)[i]); }); break;
    case DType::kI32: convert([&](int64_t i) { return float(static_cast<const int32_t*>(data_)[i]); }); break;
    case DType::kI64: convert([&](int64_t i) { return float(static_cast<const int64_t*>(data_)[i]); }); break;
  }
  return out;
}

}  // namespace exl3
