// BannedStringFilter: one request's banned strings (exl3.v1.SamplingParams.banned_strings) on its
// output. It holds back output tokens together with their text and logprobs while the text could
// still turn into a banned string, releases them once no banned string can reach back into them
// (a released token is never retracted), and finds banned strings, matched ASCII-case-insensitively
// (A-Z lower-cased on both sides), naming the output token to rewind to. It sits before the
// StopStringFilter: only released text goes on to it.
//
// Releases end only where no suffix of the released text is a proper prefix of a banned string:
// a rewind may replace everything held, so released text must not be able to start a banned
// string whatever follows it ("x" stays held under a ban of "xyz" even when "xa" follows, since a
// rewind may put "yz" after it).
//
// Tokenizer-free: the serving loop pushes each output token with the text its StreamingDetokenizer
// returned for it and whether the detokenizer still holds bytes afterwards. Bytes held there (an
// unfinished UTF-8 character, a byte-fallback run) appear with a later token; every token of such a
// run counts as reaching to where the run's text ends, so a banned string that starts inside the
// run's text rewinds to the run's first token, and a run is never released before its text is known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/sampling.h"

namespace exl3 {

class BannedStringFilter {
 public:
  // Each string non-empty (validate_request refuses empty ones; checked). No strings = off: every
  // token and its text pass at once.
  explicit BannedStringFilter(const std::vector<std::string>& banned_strings);

  bool active() const { return !banned_.empty(); }

  // The next output token: `text` is what the detokenizer returned when it was pushed,
  // `text_pending` whether the detokenizer holds bytes after it.
  void push(int32_t token, std::string_view text, bool text_pending,
            const std::optional<TokenLogprobs>& logprobs = std::nullopt);
  // Text without a token of its own at the end of generation (the detokenizer's flush): it ends
  // the pending run.
  void push_tail(std::string_view text);

  struct Match {
    // Output index of the first token whose text reaches into the banned string (num_tokens() when
    // the match lies in text no token claims, which only a tail can give).
    int32_t token_index = 0;
    size_t text_offset = 0;  // where the banned string starts in the output text
  };
  // The earliest banned string in the output text, if any (it always lies in held text).
  std::optional<Match> find() const;

  // What may be streamed: tokens in output order, exactly their text, and their logprobs (one per
  // token when every one of them has logprobs, else empty).
  struct Release {
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<TokenLogprobs> logprobs;
  };
  // The held tokens that no banned string can retract any more (call when find() found nothing).
  Release take_safe();
  // The end of generation without a match: everything held.
  Release take_all();
  // A match that cannot be undone (the sequence has finished, or may not rewind): the held tokens
  // before match.token_index and the held text before match.text_offset. Everything else is
  // dropped; the filter then holds nothing.
  Release cut(const Match& match);
  // After the scheduler rewound the sequence to `tokens` output tokens (a match's token_index, at
  // least released_tokens()): drops the later tokens and their text.
  void rewind(int32_t tokens);

  int32_t num_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t released_tokens() const { return released_; }
  // The output text of all kept tokens (released and held).
  const std::string& text() const { return text_; }

 private:
  struct Token {
    int32_t id = 0;
    std::optional<TokenLogprobs> logprobs;
    // Where the text this token contributes to ends (the run's end for a run); npos while pending.
    size_t end = std::string::npos;
  };

  // Tokens [released_, count) and text [released_text_, text_end).
  Release release(int32_t count, size_t text_end);
  // Whether some suffix of text [0, text_end) is a proper prefix of a banned string.
  bool may_continue(size_t text_end) const;

  std::vector<std::string> banned_;  // lower-cased
  std::string text_;
  std::string lower_;  // text_ lower-cased (A-Z)
  std::vector<Token> tokens_;
  int32_t released_ = 0;
  size_t released_text_ = 0;
  int32_t run_start_ = -1;  // first token of the pending run, -1 when none
};

}  // namespace exl3
