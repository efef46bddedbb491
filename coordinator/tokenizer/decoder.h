// The decoder of tokenizer.json: how token strings become text. Two kinds:
// - ByteLevel (alone): tokens spell bytes in the byte-level alphabet; the joined bytes become
//   UTF-8 with invalid parts replaced (Tokenizer handles this kind with its byte tables);
// - a chain of SentencePiece-style steps, alone or in a Sequence, run as Hugging Face's
//   decode_chain does on the list of tokens: per token Replace (String pattern), Strip (content,
//   start, stop), Metaspace (see metaspace.h) and ByteFallback (runs of consecutive "<0xAB>"
//   tokens become their bytes: the text when the run is valid UTF-8, else one U+FFFD per byte),
//   then Fuse (join), after which only Strip may follow (it then acts on the whole text).
// Other decoders, and chains outside that form, are refused by name when loading.
//
// DecodeStream runs such a chain incrementally, one token at a time, with the same result as
// decoding all tokens at once: text is released as soon as no later token can change it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/metaspace.h"
#include "nlohmann/json.hpp"

namespace exl3 {

class Decoder {
 public:
  // `spec` is tokenizer.json's "decoder"; `file` names the file in errors.
  static absl::StatusOr<Decoder> from_json(const nlohmann::json& spec, const std::string& file);

  bool byte_level() const { return byte_level_; }

  // Chains only: what one token stands for in the middle of a text (not the first token, so no
  // start-of-text rule applies): a byte token (with ByteFallback) is its single raw byte, other
  // tokens go through the per-token steps.
  std::string token_text_in_context(std::string_view token) const;

 private:
  friend class DecodeStream;
  struct Step {
    enum class Kind { kReplace, kStrip, kMetaspace, kByteFallback } kind;
    std::string pattern;  // Replace: searched for
    std::string content;  // Replace: the replacement; Strip: the character stripped
    size_t start = 0;     // Strip: at most this many leading `content` characters
    size_t stop = 0;      // Strip: at most this many trailing ones
    Metaspace metaspace;
  };
  static absl::Status parse_steps(const nlohmann::json& spec, const std::string& file, Decoder& out);

  bool byte_level_ = false;
  bool fused_ = false;                  // a Fuse step was seen
  std::vector<Step> per_token_;         // before Fuse, in order
  std::vector<Step> whole_text_;        // Strip steps after Fuse, in order
};

// Incremental decoding with a Decoder chain (not ByteLevel). Tokens are the strings of
// tokenizer.json (vocabulary strings or added tokens' contents).
class DecodeStream {
 public:
  // `decoder` must outlive this object.
  explicit DecodeStream(const Decoder& decoder);

  // Appends to `out` the text that `token` completes (often empty while a run of byte tokens or
  // trailing strippable characters is held).
  void push(std::string_view token, std::string& out);

  // Appends the held text; the text of all tokens pushed is then complete.
  void finish(std::string& out);

  // Bytes of text held back (the raw bytes of an unfinished byte run, trailing characters that a
  // final Strip may remove).
  size_t pending_bytes() const;

 private:
  struct StripState {
    bool past_start = false;  // a character other than `content` has come (or `start` were dropped)
    size_t dropped = 0;       // leading `content` characters dropped
    size_t held = 0;          // trailing `content` characters held back
  };
  // Element `element` enters per-token step `stage` (== per_token_.size(): the joined text).
  void feed(size_t stage, std::string element, std::string& out);
  // Text through the whole-text Strip steps from `first`; the released part is appended.
  void whole_text(size_t first, std::string_view text, std::string& out);

  const Decoder* decoder_;
  std::vector<size_t> index_;       // per step: elements seen (Metaspace's first-token rule)
  std::vector<std::string> run_;    // per step (ByteFallback): bytes of the current run
  std::vector<StripState> strips_;  // per whole-text Strip
};

}  // namespace exl3
