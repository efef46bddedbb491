// A minimal byte-level BPE tokenizer for synthetic models: 256 byte tokens (the GPT-2 byte
// alphabet, no merges) plus BOS/EOS as special added tokens at the model's ids. Every text
// encodes (one token per byte) and decodes back, which is all a benchmark needs.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "bench/model_shapes.h"

namespace exl3 {

// Writes tokenizer.json, tokenizer_config.json and special_tokens_map.json into `dir`. Byte
// tokens take the lowest ids that are not the BOS/EOS ids.
absl::Status write_synthetic_tokenizer(const std::string& dir, const ModelShape& shape);

}  // namespace exl3
