// Reference gated activation: silu(gate) ⊙ up.
#include <cmath>

#include "kernels/ops.h"

namespace exl3 {

Tensor silu_mul_ref(const Tensor& gate, const Tensor& up) {
  EXL3_CHECK(gate.shape() == up.shape(), "silu_mul_ref: ", shape_string(gate.shape()), " vs ", shape_string(up.shape()));
  Tensor out = Tensor::zeros(DType::kF32, gate.shape());
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* o = out.mutable_data<float>();
  for (int64_t i = 0; i < gate.numel(); ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  return out;
}

}  // namespace exl3
