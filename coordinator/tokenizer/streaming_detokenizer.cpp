// Incremental, UTF-8 safe detokenization (see streaming_detokenizer.h).
#include "coordinator/tokenizer/streaming_detokenizer.h"

#include "coordinator/tokenizer/utf8.h"

namespace exl3 {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {
  if (!tokenizer.decoder().byte_level()) chain_.emplace(tokenizer.decoder());
}

std::string StreamingDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  if (chain_) {
    std::string out;
    if (const std::optional<std::string_view> text = tokenizer_->token_text(id)) chain_->push(*text, out);
    return out;
  }
  pending_.append(tokenizer_->token_bytes(id));
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::Step st = utf8::step(pending_, pos);
    if (st.kind == utf8::StepKind::kIncomplete) break;
    if (st.kind == utf8::StepKind::kValid) {
      out.append(pending_, pos, st.length);
    } else {
      out.append(utf8::kReplacement);
    }
    pos += st.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamingDetokenizer::flush() {
  if (chain_) {
    std::string out;
    chain_->finish(out);
    chain_.emplace(tokenizer_->decoder());
    return out;
  }
  std::string out = utf8::lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace exl3
