// Reference residual add: x += y elementwise.
#include "kernels/ops.h"

namespace exl3 {

void add_inplace_ref(Tensor& x, const Tensor& y) {
  EXL3_CHECK(x.shape() == y.shape(), "add_inplace_ref: ", shape_string(x.shape()), " vs ", shape_string(y.shape()));
  float* a = x.mutable_data<float>();
  const float* b = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) a[i] += b[i];
}

}  // namespace exl3
