// tokenizer.json and tokenizer_config.json from a GGUF file's tokenizer.ggml.* metadata, in the
// shape Hugging Face transformers builds from the same file:
// - model "gpt2": byte-level BPE (the file's vocabulary and merges; tokens spelled outside the
//   byte alphabet re-spelled from their UTF-8 bytes) with the pre-tokenizer `tokenizer.ggml.pre`
//   names (pre_tokenizer_table.h);
// - model "llama": SentencePiece-style BPE with byte fallback (Metaspace "first", no normalizer),
//   merges recovered from the vocabulary and scores as transformers' generate_merges does.
// Control tokens become special added tokens, user-defined ones plain added tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "import/gguf_reader.h"
#include "nlohmann/json.hpp"

namespace exl3 {

struct TokenizerFiles {
  nlohmann::json tokenizer;         // tokenizer.json
  nlohmann::json tokenizer_config;  // tokenizer_config.json
  std::optional<int64_t> bos_id;
  std::optional<int64_t> eos_id;
  std::optional<int64_t> eot_id;    // tokenizer.ggml.eot_token_id (chat end of turn)
  std::optional<int64_t> pad_id;
  int64_t vocab_size = 0;
  std::string summary;              // one line for the import log
};

// `context_length` goes to tokenizer_config.json's model_max_length.
absl::StatusOr<TokenizerFiles> make_tokenizer_files(const GgufFile& file, int64_t context_length);

// Merges a SentencePiece-style vocabulary implies (transformers' generate_merges with scores):
// every split of a token into two tokens, best score first, then longer left, longer right pieces.
std::vector<std::pair<std::string, std::string>> merges_from_scores(const std::vector<std::string>& tokens,
                                                                    const std::vector<double>& scores);

}  // namespace exl3
