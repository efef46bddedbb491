// The normalizer of tokenizer.json: none (null), or a chain of steps, alone or in a Sequence:
// Unicode NFC (utf8proc), Prepend (a string put in front of non-empty text, as SentencePiece-style
// Llama 2 tokenizers put "▁") and Replace with a String pattern (every non-overlapping
// occurrence, left to right). Other normalizers, and Replace with a Regex, are refused when loading.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exl3 {

class Normalizer {
 public:
  // `spec` is tokenizer.json's "normalizer"; `file` names the file in errors.
  static absl::StatusOr<Normalizer> from_json(const nlohmann::json& spec, const std::string& file);

  bool is_identity() const { return steps_.empty(); }

  // `text` normalized. Bytes that are not valid UTF-8 are kept as they are (NFC applies to the
  // valid runs between them).
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kNfc, kPrepend, kReplace } kind;
    std::string pattern;  // Replace: the string searched for
    std::string content;  // Prepend: the prefix; Replace: the replacement
  };
  static absl::StatusOr<Step> parse_step(const nlohmann::json& spec, const std::string& file);

  std::vector<Step> steps_;
};

}  // namespace exl3
