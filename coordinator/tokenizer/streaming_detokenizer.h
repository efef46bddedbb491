// StreamingDetokenizer: turns generated ids into text one id at a time, for streaming to
// clients. It only ever returns whole UTF-8 characters, and the concatenation of all returned
// pieces equals Tokenizer::decode of all the ids.
// - ByteLevel decoder: the bytes of a character split across tokens are held until the character
//   is complete; bytes that can never form a character become U+FFFD as soon as that is certain.
// - Decoder chains (SentencePiece style, see decoder.h): a run of "<0xAB>" byte tokens is held
//   until a token that is not a byte ends it (Hugging Face decodes the run as a whole: one U+FFFD
//   per byte if any part is invalid), and so are trailing characters that a final Strip may
//   remove; start-of-text rules (the leading space stripped, Metaspace's first token) apply only
//   at the start of the stream.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "coordinator/tokenizer/tokenizer.h"

namespace exl3 {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);

  // The text completed by `id` (often empty, or several characters).
  std::string push(int32_t id);

  // The end of the stream: the held bytes of an unfinished character, as U+FFFD (empty when
  // nothing is held). The detokenizer is then empty and may start a new stream.
  std::string flush();

  // Bytes held back because a later token may complete or change them.
  size_t pending_bytes() const { return chain_ ? chain_->pending_bytes() : pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;                // ByteLevel: bytes of an unfinished character
  std::optional<DecodeStream> chain_;  // decoder chains

};

}  // namespace exl3
