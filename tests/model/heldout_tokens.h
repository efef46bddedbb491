// Tokens of the held-out text (tests/data/reference/heldout_ids.safetensors, ExLlamaV3's fixture
// data) for the model tests: `n` consecutive ids of its first sequence from `offset`.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/token_ids_file.h"
#include "common/test_paths.h"
#include "kernels/check.h"

namespace exl3::testing {

inline std::vector<int32_t> heldout_tokens(int64_t offset, int64_t n) {
  auto ids = load_token_sequences(test_data("reference/heldout_ids.safetensors"));
  EXL3_CHECK_OK(ids.status());
  EXL3_CHECK(offset >= 0 && offset + n <= static_cast<int64_t>((*ids)[0].size()), "held-out tokens [", offset, ", ",
             offset + n, ") outside the sequence");
  return std::vector<int32_t>((*ids)[0].begin() + offset, (*ids)[0].begin() + offset + n);
}

}  // namespace exl3::testing
