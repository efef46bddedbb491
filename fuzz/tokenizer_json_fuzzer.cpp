// libFuzzer target: tokenizer.json of arbitrary bytes through Tokenizer::from_file; a tokenizer
// it accepts then encodes and decodes a slice of the input itself, so that fuzzed vocabularies,
// merges, regexes and added tokens all meet text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "coordinator/tokenizer/streaming_detokenizer.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static exl3::fuzz::MemFile file;
  file.write(data, size);
  absl::StatusOr<exl3::Tokenizer> tokenizer = exl3::Tokenizer::from_file(file.path());
  if (!tokenizer.ok()) return 0;
  const exl3::Tokenizer& t = *tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 512));
  for (bool parse_special : {false, true}) {
    const std::vector<int32_t> ids = t.encode(text, parse_special);
    for (int32_t id : ids) {
      if (!t.has_token(id)) std::abort();  // encode only emits ids that name a token
    }
    for (bool skip_special : {false, true}) {
      const std::string whole = t.decode(ids, skip_special);
      exl3::StreamingDetokenizer stream(t, skip_special);
      std::string pieces;
      for (int32_t id : ids) pieces += stream.push(id);
      pieces += stream.flush();
      if (pieces != whole) std::abort();  // streaming equals decoding all at once
    }
  }
  return 0;
}
