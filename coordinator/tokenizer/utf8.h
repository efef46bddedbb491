// UTF-8 helpers for the tokenizer: stepping through bytes by Unicode's table of well-formed
// sequences (Table 3-7), lossy conversion (each maximal invalid subpart becomes one U+FFFD, the
// practice Unicode recommends and Rust's from_utf8_lossy follows) and code point decoding.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace exl3::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class StepKind {
  kValid,       // a whole well-formed character of `length` bytes
  kIncomplete,  // the `length` bytes up to the end of the input start a character, unfinished
  kInvalid,     // `length` (>= 1) bytes that can never start a well-formed character
};

struct Step {
  StepKind kind;
  size_t length;
};

// Classifies the bytes of `s` starting at `pos` (pos < s.size()).
Step step(std::string_view s, size_t pos);

bool is_valid(std::string_view s);

// `s` with every invalid or unfinished sequence replaced by U+FFFD.
std::string lossy(std::string_view s);

// The code point of the well-formed character of `length` bytes at `pos`.
char32_t decode(std::string_view s, size_t pos, size_t length);

void append(std::string& out, char32_t code_point);

// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_white_space(char32_t c);

}  // namespace exl3::utf8
