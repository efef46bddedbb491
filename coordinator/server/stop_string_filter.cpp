// Stop-string matching with hold-back of possible partial matches.
#include "coordinator/server/stop_string_filter.h"

#include <algorithm>

namespace exl3 {

StopStringFilter::Result StopStringFilter::append(const std::string& delta) {
  Result r;
  if (stopped_) return r;
  text_ += delta;
  if (stops_.empty()) {
    r.emit = text_.substr(emitted_);
    emitted_ = text_.size();
    return r;
  }
  size_t longest = 0;
  for (const std::string& s : stops_) longest = std::max(longest, s.size());
  // A match can only involve text that was held back plus the new delta.
  const size_t search_from = emitted_ > longest ? emitted_ - longest : 0;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t pos = text_.find(s, search_from);
    if (pos != std::string::npos) first = std::min(first, pos);
  }
  if (first != std::string::npos) {
    stopped_ = true;
    r.stopped = true;
    if (first > emitted_) r.emit = text_.substr(emitted_, first - emitted_);
    emitted_ = text_.size();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Such a suffix can
  // only start where the stop string's first byte occurs, so the candidates are found with find():
  // the cost per token grows with the stop strings' total length, not with its square.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, text_.size());
    if (max_len <= hold) continue;
    const size_t end = text_.size() - hold;  // starts from here on give suffixes no longer than hold
    for (size_t start = text_.find(s[0], text_.size() - max_len); start < end; start = text_.find(s[0], start + 1)) {
      const size_t len = text_.size() - start;  // the first match is the longest
      if (text_.compare(start, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  const size_t safe_end = std::max(emitted_, text_.size() - hold);
  r.emit = text_.substr(emitted_, safe_end - emitted_);
  emitted_ = safe_end;
  return r;
}

std::string StopStringFilter::flush() {
  if (stopped_) return "";
  std::string rest = text_.substr(emitted_);
  emitted_ = text_.size();
  return rest;
}

}  // namespace exl3
