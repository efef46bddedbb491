// Tokenizer: a Hugging Face tokenizer.json with a BPE model (byte-level, as in GPT-2, Llama 3 and
// Qwen, or SentencePiece-style with byte fallback, as in Llama 2 and Mistral) loaded into an
// immutable object that encodes text to ids and decodes ids to text, plus the BOS/EOS facts of a
// model directory. Encoding follows Hugging Face's order: added tokens are found in the raw text
// first (special ones only when parse_special), the rest is normalized (NFC, Prepend, Replace),
// pre-tokenized (Split regexes + ByteLevel, Metaspace, or nothing) and merged by the BPE model.
// Decoding runs the decoder (ByteLevel, or a chain of Replace / ByteFallback / Metaspace / Fuse /
// Strip, see decoder.h) with no space clean-up. Anything in tokenizer.json that would change the
// result and is not implemented is refused by name when loading; truncation and padding settings
// are ignored (encode never truncates or pads).
//
// Thread safety: all const methods may be called from several threads at once.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/added_tokens.h"
#include "coordinator/tokenizer/bpe_model.h"
#include "coordinator/tokenizer/decoder.h"
#include "coordinator/tokenizer/normalizer.h"
#include "coordinator/tokenizer/pre_tokenizer.h"
#include "coordinator/tokenizer/string_map.h"

namespace exl3 {

class Tokenizer {
 public:
  // Loads a tokenizer.json file. BOS/EOS are unknown (bos_id() empty, eos_ids() empty,
  // add_bos() false); use from_model_dir for a model.
  static absl::StatusOr<Tokenizer> from_file(const std::string& path);

  // Loads DIR/tokenizer.json and the special-token facts of the model directory:
  // - bos: tokenizer_config.json "bos_token" (a string or {"content": ...}), else
  //   generation_config.json / config.json "bos_token_id";
  // - eos: the union of tokenizer_config.json "eos_token" and the "eos_token_id" (an int or a
  //   list) of config.json and generation_config.json;
  // - add_bos: tokenizer_config.json "add_bos_token" when present, else whether tokenizer.json's
  //   post-processor template starts single sequences with the BOS token.
  // Each file is optional; a token named there that the tokenizer does not have is an error.
  static absl::StatusOr<Tokenizer> from_model_dir(const std::string& dir);

  // Ids of `text`; never adds BOS/EOS. parse_special false leaves the text of special tokens as
  // plain text (other added tokens are still matched). Bytes that are not valid UTF-8 are
  // encoded as their byte tokens, never altered.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // Text of `ids` (no space clean-up). Invalid UTF-8 in the result (e.g. a multi-byte character
  // cut in half) becomes U+FFFD: with the ByteLevel decoder each maximal invalid part, with
  // ByteFallback each byte of an invalid run, as Hugging Face does. skip_special drops special
  // added tokens. Ids that name no token (see has_token) are skipped, as Hugging Face does.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes one token stands for in the middle of a text (empty for an id without a
  // token): ByteLevel, the bytes it spells; a decoder chain, its text after the per-token steps
  // (e.g. "▁Hello" -> " Hello"), or the single byte of a "<0xAB>" token. Rules that apply only at
  // the start of the text (Metaspace's first token, Strip after Fuse) are not applied.
  std::string_view token_bytes(int32_t id) const;
  // The token's string as written in tokenizer.json (byte-level alphabet, e.g. "ĠHello", or an
  // added token's content).
  std::optional<std::string_view> token_text(int32_t id) const;
  // Id of an added token's content or a vocabulary string (added tokens take precedence).
  std::optional<int32_t> token_id(std::string_view text) const;

  // One more than the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  bool has_token(int32_t id) const { return id >= 0 && id < vocab_size() && tokens_[id].present; }
  bool is_special(int32_t id) const { return has_token(id) && tokens_[id].special; }

  // The decoder; StreamingDetokenizer runs a chain incrementally.
  const Decoder& decoder() const { return decoder_; }

  std::optional<int32_t> bos_id() const { return bos_id_; }
  const std::set<int32_t>& eos_ids() const { return eos_ids_; }
  bool add_bos() const { return add_bos_; }

 private:
  struct TokenInfo {
    std::string text;   // as in tokenizer.json
    std::string bytes;  // see token_bytes
    bool present = false;
    bool special = false;
  };

  Tokenizer() = default;
  // Normalizes, pre-tokenizes and BPE-encodes text that holds no added token; `first`: the text
  // starts the input.
  void encode_plain(std::string_view text, bool first, RegexScratch& scratch,
                    StringMap<std::vector<int32_t>>& cache, std::vector<int32_t>& out) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  Decoder decoder_;
  AddedTokenMatcher raw_added_;         // added tokens matched before normalization
  AddedTokenMatcher normalized_added_;  // added tokens matched in normalized text
  StringMap<int32_t> added_by_content_;
  std::vector<TokenInfo> tokens_;       // by id
  // The first id of the post-processor's template for single sequences, when that starts with
  // a special token (how a tokenizer without add_bos_token says that it adds BOS).
  std::optional<int32_t> template_first_id_;

  std::optional<int32_t> bos_id_;
  std::set<int32_t> eos_ids_;
  bool add_bos_ = false;
};

// Batch encoding for tools (exl3-eval --tokenizer PATH --encode-jsonl FILE): each input line
// {"text": "..."} becomes the output line {"ids":[...]}, in order. Blank lines are skipped, so
// output line k answers the k-th non-blank input line. Errors name the (1-based) input line:
// malformed JSON, or no string field "text". Implemented in encode_jsonl.cpp.
absl::Status encode_jsonl(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, bool parse_special);

}  // namespace exl3
