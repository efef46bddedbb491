// Added tokens (tokenizer.json's "added_tokens": special markers such as "<|im_start|>" and
// extra words) and the matcher that finds them in text before pre-tokenization, as Hugging Face
// does: leftmost-longest, non-overlapping matches; single_word matches only between non-word
// characters; lstrip/rstrip take the whitespace before/after into the token.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exl3 {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched in normalized text (else in the raw text)
};

// Parses tokenizer.json's "added_tokens" list (null or absent: none). Missing flags take
// Hugging Face's defaults (normalized = !special, the others false).
absl::StatusOr<std::vector<AddedToken>> parse_added_tokens(const nlohmann::json& list, const std::string& file);

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;  // -1: plain text
  };

  // Appends the segments of `text` to `out`: added-token matches and the plain text between
  // them, covering `text` in order. With parse_special false, special tokens are left in the
  // text (their matches are skipped, and the search resumes after them, as Hugging Face's
  // encode_special_tokens does); other added tokens are still matched.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

  bool empty() const { return tokens_.empty(); }

 private:
  // Byte trie of the contents; node 0 is the root.
  static uint64_t edge_key(int32_t node, unsigned char byte) {
    return (static_cast<uint64_t>(node) << 8) | byte;
  }
  // Index into tokens_ of the longest content starting at `pos`, or -1; sets `end`.
  int32_t longest_match(std::string_view text, size_t pos, size_t& end) const;

  std::vector<AddedToken> tokens_;
  std::vector<int32_t> node_token_;  // per trie node: index into tokens_ ending there, or -1
  std::unordered_map<uint64_t, int32_t> edges_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace exl3
