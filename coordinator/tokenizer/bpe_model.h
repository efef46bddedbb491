// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): a vocabulary of token strings,
// merges ranked by their order, and the merge loop that turns one pre-token into ids. Two
// spellings of the input: byte-level (GPT-2, Llama 3, Qwen: every byte is one character of the
// byte-level alphabet) or the text's own characters (SentencePiece-style Llama 2 / Mistral, where
// characters missing from the vocabulary fall back to "<0xAB>" byte tokens with byte_fallback).
// Options that change the algorithm further (dropout, subword prefixes/suffixes) are refused.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/string_map.h"
#include "nlohmann/json.hpp"

namespace exl3 {

class BpeModel {
 public:
  // `spec` is tokenizer.json's "model"; `file` names the file in errors. Merges may be written
  // as "a b" strings or ["a", "b"] pairs; both sides and their concatenation must be tokens.
  // `byte_level`: pre-tokens are raw bytes to spell in the byte-level alphabet (a ByteLevel
  // pre-tokenizer); otherwise they are looked up character by character as they are.
  static absl::StatusOr<BpeModel> from_json(const nlohmann::json& spec, bool byte_level, const std::string& file);

  // Appends the ids of one pre-token. With ignore_merges, a pre-token that is itself a
  // vocabulary token is emitted whole. Otherwise each character (each byte, byte-level) starts as
  // its own symbol and the adjacent pair with the lowest merge rank (leftmost on ties) is merged
  // until none is left. A character missing from the vocabulary becomes the byte tokens
  // "<0xAB>" of its UTF-8 bytes with byte_fallback when the vocabulary has them all, else
  // unk_token when there is one (consecutive ones fused with fuse_unk), else it is dropped, in
  // Hugging Face's order (a pending unk_token is emitted after byte tokens that follow it). Bytes
  // that are not valid UTF-8 count as characters of their own.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  // Token string (byte-level alphabet) -> id.
  const StringMap<int32_t>& vocab() const { return vocab_; }
  std::optional<int32_t> find(std::string_view token) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // id of the merged token
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  // Appends the initial symbol ids of `piece` (before merges).
  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;

  StringMap<int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  bool byte_level_ = false;
  // Per byte value: byte-level, the id of the byte's alphabet character; otherwise, for ASCII,
  // the id of the one-character token. -1 if missing.
  std::array<int32_t, 256> unit_ids_{};
  std::array<int32_t, 256> fallback_ids_{};  // id of "<0xAB>" per byte, -1 if missing
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace exl3
