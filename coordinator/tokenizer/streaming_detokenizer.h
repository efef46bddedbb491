// StreamingDetokenizer: turns generated ids into text one id at a time, for streaming to
// clients. It only ever returns whole UTF-8 characters: the bytes of a character split across
// tokens are held until the character is complete. Bytes that can never form a character become
// U+FFFD as soon as that is certain, so the concatenation of all returned pieces equals
// Tokenizer::decode of all the ids.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/tokenizer/tokenizer.h"

namespace exl3 {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // The text completed by `id` (often empty, or several characters).
  std::string push(int32_t id);

  // The end of the stream: the held bytes of an unfinished character, as U+FFFD (empty when
  // nothing is held). The detokenizer is then empty and may start a new stream.
  std::string flush();

  // Bytes held back because they may start a character that the next token completes.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace exl3
