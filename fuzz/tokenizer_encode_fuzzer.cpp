// libFuzzer target: the real tokenizers (fuzz_util.h) on arbitrary bytes. Byte 0 picks the
// tokenizer, byte 1 the flags; the rest is text to encode, or (flag 4) little-endian int32 ids
// to decode. Checks: encode emits only real ids; NFC-stable valid UTF-8 survives encode+decode
// unchanged; streaming detokenization equals decoding all at once, for any ids.
#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "coordinator/tokenizer/streaming_detokenizer.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer/utf8.h"
#include "fuzz/fuzz_util.h"

namespace {

bool nfc_stable(std::string_view text) {
  const std::string z(text);  // utf8proc wants NUL-terminated input
  if (z.find('\0') != std::string::npos) return false;
  utf8proc_uint8_t* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(z.c_str()));
  if (nfc == nullptr) return false;
  const bool same = std::strcmp(reinterpret_cast<const char*>(nfc), z.c_str()) == 0;
  std::free(nfc);
  return same;
}

void check_stream(const exl3::Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  const std::string whole = t.decode(ids, skip_special);
  if (!exl3::utf8::is_valid(whole)) std::abort();
  exl3::StreamingDetokenizer stream(t, skip_special);
  std::string pieces;
  for (int32_t id : ids) pieces += stream.push(id);
  pieces += stream.flush();
  if (pieces != whole || stream.pending_bytes() != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<exl3::Tokenizer>& all = exl3::fuzz::tokenizers();
  if (size < 2) return 0;
  const exl3::Tokenizer& t = all[data[0] % all.size()];
  const bool parse_special = (data[1] & 1) != 0;
  const bool skip_special = (data[1] & 2) != 0;
  const bool ids_mode = (data[1] & 4) != 0;
  data += 2;
  size -= 2;

  if (ids_mode) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 4 <= size; i += 4) {
      uint32_t raw = 0;
      std::memcpy(&raw, data + i, 4);
      // Mostly ids near the vocabulary, sometimes anything (negative, huge).
      const int32_t id = (raw >> 31) != 0 ? static_cast<int32_t>(raw)
                                          : static_cast<int32_t>(raw % (static_cast<uint32_t>(t.vocab_size()) + 8));
      ids.push_back(id);
    }
    check_stream(t, ids, skip_special);
    return 0;
  }

  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = t.encode(text, parse_special);
  for (int32_t id : ids) {
    if (!t.has_token(id)) std::abort();
  }
  if (!text.empty() && ids.empty()) std::abort();  // every byte becomes some token
  if (exl3::utf8::is_valid(text) && nfc_stable(text) && t.decode(ids) != text) std::abort();
  check_stream(t, ids, skip_special);
  return 0;
}
