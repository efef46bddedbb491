// Incremental, UTF-8 safe detokenization (see streaming_detokenizer.h).
#include "coordinator/tokenizer/streaming_detokenizer.h"

#include "coordinator/tokenizer/utf8.h"

namespace exl3 {

std::string StreamingDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
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
  std::string out = utf8::lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace exl3
