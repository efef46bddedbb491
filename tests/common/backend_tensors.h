// Helpers of the backend tests: tensors allocated on a Backend, and copies between them and host
// tensors (allocation failures abort: a test's sizes are fixed).
#pragma once

#include "kernels/backend.h"
#include "kernels/check.h"

namespace exl3::testing {

inline Tensor device_zeros(Backend& b, DType dtype, const Shape& shape) {
  absl::StatusOr<Tensor> t = b.allocate(dtype, shape, "test tensor");
  EXL3_CHECK_OK(t.status());
  return *t;
}

inline Tensor to_device(Backend& b, const Tensor& host) {
  Tensor t = device_zeros(b, host.dtype(), host.shape());
  b.upload(host, t);
  return t;
}

inline Tensor to_host(Backend& b, const Tensor& dev) {
  Tensor host = Tensor::zeros(dev.dtype(), dev.shape());
  b.download(dev, host);
  return host;
}

}  // namespace exl3::testing
