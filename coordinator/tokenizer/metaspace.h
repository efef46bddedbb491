// The Metaspace component of SentencePiece-style tokenizer.json files (Mistral, newer Llama
// conversions): as a pre-tokenizer it turns spaces into the replacement character ("▁"), adds
// one in front of a piece as prepend_scheme says and optionally splits before each; as a decoder
// it turns the replacement back into spaces, dropping it from the first token. The options are
// parsed once and shared by both uses.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exl3 {

enum class PrependScheme { kAlways, kFirst, kNever };

struct Metaspace {
  std::string replacement = "\xE2\x96\x81";  // U+2581, one character
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;

  // `spec` is a {"type": "Metaspace", ...} object; `where` ("pre_tokenizer", "decoder") and
  // `file` name it in errors. Fields: replacement (one character), prepend_scheme ("always",
  // "first", "never"), split (default true), and the legacy add_prefix_space, used when
  // prepend_scheme is absent (true: always, false: never).
  static absl::StatusOr<Metaspace> from_json(const nlohmann::json& spec, const std::string& where,
                                             const std::string& file);

  // Pre-tokenizer: appends the pieces of `text`. `first` says that the text starts the input
  // (the piece before any added token), which prepend_scheme "first" needs. With split, every
  // replacement character starts a new piece (merged with what follows it).
  void pre_tokenize(std::string_view text, bool first, std::vector<std::string>& out) const;

  // Decoder, one token: the replacement becomes a space, except in the token at `index` 0
  // where it is dropped (every occurrence) unless prepend_scheme is "never".
  std::string decode_token(std::string_view token, size_t index) const;
};

}  // namespace exl3
