// The pre-tokenizer of a byte-level BPE tokenizer.json: zero or more Split steps (a regex or
// literal pattern, behavior "Isolated", invert false), then one ByteLevel step (add_prefix_space;
// use_regex splits with GPT-2's pattern). This covers GPT-2 (ByteLevel alone) and Llama 3 / Qwen
// (Sequence of Split + ByteLevel without regex). Anything else is refused when loading.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "nlohmann/json.hpp"

namespace exl3 {

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer"; `file` names the file in errors.
  static absl::StatusOr<PreTokenizer> from_json(const nlohmann::json& spec, const std::string& file);

  // Appends the pre-tokens of `text` to `out`: raw bytes (a prefix space added where the
  // ByteLevel step asks for one); mapping them to the byte-level alphabet is the BPE model's job.
  void split(std::string_view text, RegexScratch& scratch, std::vector<std::string>& out) const;

 private:
  std::vector<RegexSplitter> splits_;              // the Split steps, in order
  bool add_prefix_space_ = false;                  // ByteLevel's add_prefix_space
  std::optional<RegexSplitter> byte_level_regex_;  // ByteLevel's use_regex
};

}  // namespace exl3
