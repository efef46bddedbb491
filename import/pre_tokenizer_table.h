// The byte-level pre-tokenizers that GGUF's `tokenizer.ggml.pre` names (llama.cpp's names), as
// Hugging Face tokenizer.json pre_tokenizer objects: the split regexes llama.cpp applies for each
// name, then ByteLevel. An unknown name is refused by name (guessing a split silently changes
// every encoding).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exl3 {

struct ByteLevelPreTokenizer {
  nlohmann::json pre_tokenizer;  // tokenizer.json "pre_tokenizer"
  bool ignore_merges = false;    // BPE model "ignore_merges" (whole-word vocabulary hits first)
};

absl::StatusOr<ByteLevelPreTokenizer> byte_level_pre_tokenizer(const std::string& pre_name);

// The names byte_level_pre_tokenizer knows, sorted.
std::vector<std::string> known_pre_tokenizer_names();

}  // namespace exl3
