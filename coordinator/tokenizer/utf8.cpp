// UTF-8 stepping, lossy conversion and code point helpers (see utf8.h).
#include "coordinator/tokenizer/utf8.h"

#include <cstdint>

namespace exl3::utf8 {

Step step(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {StepKind::kValid, 1};
  // Length of the sequence and the allowed range of its second byte (Unicode Table 3-7); the
  // narrower ranges after E0, ED, F0 and F4 exclude overlong forms, surrogates and > U+10FFFF.
  size_t need = 0;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {StepKind::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (pos + k >= s.size()) return {StepKind::kIncomplete, k};
    const auto b = static_cast<uint8_t>(s[pos + k]);
    const uint8_t min = k == 1 ? lo : 0x80;
    const uint8_t max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {StepKind::kInvalid, k};
  }
  return {StepKind::kValid, need};
}

bool is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const Step st = step(s, pos);
    if (st.kind != StepKind::kValid) return false;
    pos += st.length;
  }
  return true;
}

std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const Step st = step(s, pos);
    if (st.kind == StepKind::kValid) {
      out.append(s.substr(pos, st.length));
    } else {
      out.append(kReplacement);
    }
    pos += st.length;
  }
  return out;
}

char32_t decode(std::string_view s, size_t pos, size_t length) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[pos + k])); };
  switch (length) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace exl3::utf8
