// Shared helpers of the tokenizer tests: the test tokenizers (loaded once per process) and file
// reading.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "common/test_paths.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace exl3::testing {

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline const absl::StatusOr<Tokenizer>& llama3_tokenizer() {
  static const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_file(work_path("llama3/tokenizer.json"));
  return tokenizer;
}

inline const absl::StatusOr<Tokenizer>& qwen3_tokenizer() {
  static const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_file(work_path("qwen3/tokenizer.json"));
  return tokenizer;
}

// The tokenizer of the small fixture model (GPT-2 style ByteLevel pre-tokenizer, 4096 ids).
inline const absl::StatusOr<Tokenizer>& fixture_tokenizer() {
  static const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_model_dir(source_path("models/exl3-4.0bpw"));
  return tokenizer;
}

}  // namespace exl3::testing
