// Tables of the byte-level alphabet (see byte_level.h), built once.
#include "coordinator/tokenizer/byte_level.h"

#include <array>

#include "coordinator/tokenizer/utf8.h"

namespace exl3::byte_level {
namespace {

// Largest code point of the alphabet: U+0100 + 67 (the 68 remapped bytes).
constexpr char32_t kMaxCodePoint = 0x100 + 67;

bool stands_for_itself(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<std::string, 256> char_of;
  std::array<int16_t, kMaxCodePoint + 1> byte_of;  // -1: not in the alphabet

  Tables() {
    byte_of.fill(-1);
    char32_t next_remapped = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const char32_t c = stands_for_itself(b) ? b : next_remapped++;
      utf8::append(char_of[b], c);
      byte_of[c] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view char_of(uint8_t b) { return tables().char_of[b]; }

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out.append(t.char_of[static_cast<uint8_t>(ch)]);
  return out;
}

std::optional<std::string> decode(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const utf8::Step st = utf8::step(token, pos);
    if (st.kind != utf8::StepKind::kValid) return std::nullopt;
    const char32_t c = utf8::decode(token, pos, st.length);
    if (c > kMaxCodePoint || t.byte_of[c] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.byte_of[c]));
    pos += st.length;
  }
  return out;
}

}  // namespace exl3::byte_level
