// The byte-level alphabet of GPT-2 style BPE: every byte value stands for one printable Unicode
// character, so token strings in tokenizer.json (e.g. "ĠHello" for " Hello") spell raw bytes.
// Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for the code point of the same value; the other
// 68 bytes (controls, space, 0x7F..0xA0, 0xAD) take U+0100, U+0101, ... in byte order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace exl3::byte_level {

// The character (UTF-8, one or two bytes) that stands for byte `b`.
std::string_view char_of(uint8_t b);

// `bytes` spelled in the byte-level alphabet.
std::string encode(std::string_view bytes);

// The bytes that `token` spells, or nullopt when one of its characters is not in the alphabet.
std::optional<std::string> decode(std::string_view token);

}  // namespace exl3::byte_level
