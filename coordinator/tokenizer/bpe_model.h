// The byte-level BPE model of tokenizer.json ("model": {"type": "BPE", ...}): a vocabulary of
// byte-level token strings, merges ranked by their order, and the merge loop that turns one
// pre-token into ids. Options that change the algorithm away from byte-level BPE (dropout,
// byte_fallback, subword prefixes/suffixes) are refused when loading.
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
  static absl::StatusOr<BpeModel> from_json(const nlohmann::json& spec, const std::string& file);

  // Appends the ids of one pre-token, given as raw bytes. With ignore_merges, a pre-token that is
  // itself a vocabulary token is emitted whole. Otherwise each byte starts as its own symbol and
  // the adjacent pair with the lowest merge rank (leftmost on ties) is merged until none is left.
  // A byte missing from the vocabulary becomes unk_token when there is one (consecutive ones
  // fused with fuse_unk) and is dropped otherwise, as Hugging Face does.
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

  StringMap<int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each single-byte token, -1 if missing
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace exl3
