// A compiled PCRE2 pattern (UTF + Unicode properties, JIT) that splits text the way a Hugging Face
// Split pre-tokenizer with behavior "Isolated" does: every match and every gap between matches
// becomes its own piece. Bytes that are not valid UTF-8 never match (PCRE2_MATCH_INVALID_UTF), so
// they fall into gaps and are kept, never altered. Where PCRE2 and Oniguruma (the engine of Hugging
// Face tokenizers) disagree on a character class, the split follows Oniguruma (see split()).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace exl3 {

// Per-call matching state (PCRE2 match data and JIT stack). Create one per encode call; it must
// not be shared between threads. A RegexSplitter itself is immutable and thread-safe.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;

 private:
  friend class RegexSplitter;
  struct State;
  std::unique_ptr<State> state_;
};

class RegexSplitter {
 public:
  // `literal`: the pattern is a plain string (a Split's {"String": ...} pattern), not a regex.
  static absl::StatusOr<RegexSplitter> compile(std::string_view pattern, bool literal);

  // Appends the non-empty pieces of `text` to `out`, in order; their concatenation is `text`.
  // Aborts (EXL3_CHECK) if PCRE2 reports an error other than "no match", which the JIT stack
  // size (up to 64 MiB) makes unreachable for the pre-tokenizer patterns in use.
  void split(std::string_view text, RegexScratch& scratch, std::vector<std::string_view>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
  bool literal_ = false;
};

}  // namespace exl3
