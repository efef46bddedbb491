// Reference embedding lookup: one row of the table per token id.
#include <algorithm>

#include "kernels/ops.h"

namespace exl3 {

Tensor embedding_ref(const Tensor& table, std::span<const int32_t> ids) {
  EXL3_CHECK(table.rank() == 2, "embedding table must be 2-D");
  const int64_t vocab = table.dim(0), hidden = table.dim(1);
  Tensor out = Tensor::zeros(DType::kF32, {static_cast<int64_t>(ids.size()), hidden});
  const float* t = table.data<float>();
  float* o = out.mutable_data<float>();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXL3_CHECK(ids[i] >= 0 && ids[i] < vocab, "token id ", ids[i], " outside [0, ", vocab, ")");
    std::copy_n(t + ids[i] * hidden, hidden, o + static_cast<int64_t>(i) * hidden);
  }
  return out;
}

}  // namespace exl3
