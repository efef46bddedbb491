// Rows of the reference fixture files: the token ids of one sequence (I64 [sequences, tokens])
// and its logits (F32 [sequences, tokens, vocab]).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace exl3::testing {

inline std::vector<int32_t> row_ids(const Tensor& ids, int64_t row) {
  const int64_t len = ids.dim(1);
  std::vector<int32_t> out(len);
  for (int64_t i = 0; i < len; ++i) out[i] = static_cast<int32_t>(ids.data<int64_t>()[row * len + i]);
  return out;
}

inline Tensor row_logits(const Tensor& logits, int64_t row) {
  const int64_t len = logits.dim(1), vocab = logits.dim(2);
  Tensor out = Tensor::zeros(DType::kF32, {len, vocab});
  std::copy_n(logits.data<float>() + row * len * vocab, len * vocab, out.mutable_data<float>());
  return out;
}

}  // namespace exl3::testing
