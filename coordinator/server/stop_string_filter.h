// StopStringFilter: decides how much of a growing output text may be streamed when the request
// has stop strings. Text that could still turn into a stop string is held back; once a stop
// string appears, the text before it is released and the rest dropped.
#pragma once

#include <string>
#include <vector>

namespace exl3 {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {}

  struct Result {
    std::string emit;      // text to stream now
    bool stopped = false;  // a stop string matched (emit holds the text before it)
  };
  // Adds newly decoded text.
  Result append(const std::string& delta);
  // At the end of generation: whatever is still held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string text_;     // all text so far
  size_t emitted_ = 0;   // bytes of text_ already released
  bool stopped_ = false;
};

}  // namespace exl3
