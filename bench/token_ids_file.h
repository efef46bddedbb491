// Reads token-id sequences for exl3-eval: a JSON list of id lists (or one flat list), or a
// safetensors file holding one integer tensor (1-D = one sequence, 2-D = one row per sequence).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace exl3 {

using TokenSequences = std::vector<std::vector<int32_t>>;

absl::StatusOr<TokenSequences> load_token_sequences(const std::string& path);

}  // namespace exl3
