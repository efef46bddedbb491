// The pre-tokenizer of tokenizer.json, one of three forms:
// - byte-level BPE: zero or more Split steps (a regex or literal pattern, behavior "Isolated",
//   invert false), then one ByteLevel step (add_prefix_space; use_regex splits with GPT-2's
//   pattern). This covers GPT-2 (ByteLevel alone) and Llama 3 / Qwen (Split + ByteLevel);
// - SentencePiece style with Metaspace (Mistral, newer Llama conversions; see metaspace.h);
// - none (null): the text goes to the model whole, as in Llama 2 whose normalizer does the work.
// Anything else is refused when loading.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/metaspace.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "nlohmann/json.hpp"

namespace exl3 {

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer"; `file` names the file in errors.
  static absl::StatusOr<PreTokenizer> from_json(const nlohmann::json& spec, const std::string& file);

  // Appends the pre-tokens of `text` to `out`: raw bytes (a prefix space added where the
  // ByteLevel step asks for one); mapping them to the byte-level alphabet is the BPE model's job.
  // `first` says that `text` starts the input (no added token before it; Metaspace's
  // prepend_scheme "first" needs it).
  void split(std::string_view text, bool first, RegexScratch& scratch, std::vector<std::string>& out) const;

  // Whether pre-tokens are raw bytes for a byte-level vocabulary (a ByteLevel step), rather than
  // text spelled in the vocabulary's own characters.
  bool byte_level() const { return byte_level_; }

 private:
  bool byte_level_ = false;
  std::optional<Metaspace> metaspace_;
  std::vector<RegexSplitter> splits_;              // the Split steps, in order
  bool add_prefix_space_ = false;                  // ByteLevel's add_prefix_space
  std::optional<RegexSplitter> byte_level_regex_;  // ByteLevel's use_regex
};

}  // namespace exl3
