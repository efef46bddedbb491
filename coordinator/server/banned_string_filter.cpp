// Banned-string matching with hold-back of tokens and text (see banned_string_filter.h).
#include "coordinator/server/banned_string_filter.h"

#include <algorithm>

#include "kernels/check.h"

namespace exl3 {
namespace {

char lower_ascii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lowered(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower_ascii);
  return out;
}

}  // namespace

BannedStringFilter::BannedStringFilter(const std::vector<std::string>& banned_strings) {
  for (const std::string& s : banned_strings) {
    EXL3_CHECK(!s.empty(), "empty banned string");
    banned_.push_back(lowered(s));
  }
}

void BannedStringFilter::push(int32_t token, std::string_view text, bool text_pending,
                              const std::optional<TokenLogprobs>& logprobs) {
  text_ += text;
  lower_ += lowered(text);
  tokens_.push_back(Token{token, logprobs, std::string::npos});
  const int32_t index = num_tokens() - 1;
  if (text_pending) {
    if (run_start_ < 0) run_start_ = index;
    return;
  }
  for (int32_t i = run_start_ < 0 ? index : run_start_; i <= index; ++i) tokens_[i].end = text_.size();
  run_start_ = -1;
}

void BannedStringFilter::push_tail(std::string_view text) {
  text_ += text;
  lower_ += lowered(text);
  if (run_start_ < 0) return;
  for (int32_t i = run_start_; i < num_tokens(); ++i) tokens_[i].end = text_.size();
  run_start_ = -1;
}

std::optional<BannedStringFilter::Match> BannedStringFilter::find() const {
  // Released text holds no banned string and starts none: a match starts in held text.
  size_t first = std::string::npos;
  for (const std::string& s : banned_) first = std::min(first, lower_.find(s, released_text_));
  if (first == std::string::npos) return std::nullopt;
  Match m;
  m.text_offset = first;
  m.token_index = released_;
  while (m.token_index < num_tokens() && tokens_[m.token_index].end != std::string::npos &&
         tokens_[m.token_index].end <= first) {
    ++m.token_index;
  }
  return m;
}

bool BannedStringFilter::may_continue(size_t text_end) const {
  // A suffix that is a proper prefix of a banned string starts where the string's first byte
  // occurs, so the candidates are found with find().
  for (const std::string& s : banned_) {
    const size_t max_len = std::min(s.size() - 1, text_end);
    if (max_len == 0) continue;
    for (size_t start = lower_.find(s[0], text_end - max_len); start < text_end; start = lower_.find(s[0], start + 1)) {
      const size_t len = text_end - start;
      if (lower_.compare(start, len, s, 0, len) == 0) return true;
    }
  }
  return false;
}

BannedStringFilter::Release BannedStringFilter::release(int32_t count, size_t text_end) {
  Release r;
  text_end = std::max(text_end, released_text_);
  r.text = text_.substr(released_text_, text_end - released_text_);
  bool all_logprobs = true;
  for (int32_t i = released_; i < count; ++i) {
    r.tokens.push_back(tokens_[i].id);
    all_logprobs &= tokens_[i].logprobs.has_value();
  }
  for (int32_t i = released_; all_logprobs && i < count; ++i) r.logprobs.push_back(*tokens_[i].logprobs);
  released_ = count;
  released_text_ = text_end;
  return r;
}

BannedStringFilter::Release BannedStringFilter::take_safe() {
  if (!active()) return take_all();
  // Released text is never rewound: a release may only end where no banned string can start in
  // it, whatever follows (a rewind may replace everything after it).
  int32_t count = released_;
  while (count < num_tokens() && tokens_[count].end != std::string::npos) ++count;
  while (count > released_ && may_continue(tokens_[count - 1].end)) --count;
  return release(count, count == released_ ? released_text_ : tokens_[count - 1].end);
}

BannedStringFilter::Release BannedStringFilter::take_all() { return release(num_tokens(), text_.size()); }

BannedStringFilter::Release BannedStringFilter::cut(const Match& match) {
  EXL3_CHECK(match.token_index >= released_ && match.token_index <= num_tokens() &&
                 match.text_offset >= released_text_ && match.text_offset <= text_.size(),
             "cut at token ", match.token_index, ", byte ", match.text_offset, " of ", num_tokens(), " tokens, ",
             text_.size(), " bytes with ", released_, " tokens, ", released_text_, " bytes released");
  Release r = release(match.token_index, match.text_offset);
  tokens_.resize(static_cast<size_t>(released_));
  text_.resize(released_text_);
  lower_.resize(released_text_);
  run_start_ = -1;
  return r;
}

void BannedStringFilter::rewind(int32_t tokens) {
  EXL3_CHECK(tokens >= released_ && tokens <= num_tokens(), "rewind to ", tokens, " tokens of ", num_tokens(),
             " with ", released_, " released");
  const size_t end = tokens == 0 ? 0 : tokens_[tokens - 1].end;
  // A match's first token follows a token whose text was complete (see find()).
  EXL3_CHECK(end != std::string::npos && end >= released_text_ && end <= text_.size(), "rewind to ", tokens,
             " tokens: the text of token ", tokens - 1, " is not complete");
  tokens_.resize(static_cast<size_t>(tokens));
  text_.resize(end);
  lower_.resize(end);
  run_start_ = -1;
}

}  // namespace exl3
