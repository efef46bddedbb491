// SentencePiece-style tokenizer.json files (Llama 2: Prepend + Replace normalizer, no
// pre-tokenizer; Mistral: Metaspace prepend_scheme "first", split false; Metaspace with the
// legacy add_prefix_space, split and ignore_merges), all with byte_fallback. The tokenizers and
// their reference cases were made by Hugging Face's `tokenizers` package
// (scripts/testdata/make_spm_tokenizers.py, committed under tests/data/spm/): every case must
// encode to exactly the reference ids, decode to exactly the reference text (with and without
// special tokens), and stream, one id at a time, to the same text. Loading errors name the field.
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "coordinator/tokenizer/streaming_detokenizer.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using json = nlohmann::json;
using testing::test_data;
using testing::work_path;

struct Case {
  std::optional<std::string> text;  // absent: a decode-only case
  std::vector<int32_t> ids;
  std::string decoded;
  std::string decoded_skip;
};

std::vector<Case> read_cases(const std::string& path) {
  std::vector<Case> cases;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json record = json::parse(line);
    Case c;
    if (record.contains("text")) c.text = record["text"].get<std::string>();
    c.ids = record["ids"].get<std::vector<int32_t>>();
    c.decoded = record["decoded"].get<std::string>();
    c.decoded_skip = record.value("decoded_skip", c.decoded);
    cases.push_back(std::move(c));
  }
  return cases;
}

// "[12 "▁the", 7 "<0xE4>"]" for failure messages.
std::string describe(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ids[i]) + " \"" + std::string(tokenizer.token_text(ids[i]).value_or("?")) + "\"";
  }
  return out + "]";
}

std::string stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  StreamingDetokenizer detokenizer(tokenizer, skip_special);
  std::string joined;
  for (int32_t id : ids) {
    const std::string piece = detokenizer.push(id);
    EXPECT_TRUE(utf8::is_valid(piece)) << "partial UTF-8 emitted for id " << id;
    joined += piece;
  }
  joined += detokenizer.flush();
  EXPECT_EQ(detokenizer.pending_bytes(), 0u);
  return joined;
}

class SpmStyle : public ::testing::TestWithParam<const char*> {};

TEST_P(SpmStyle, MatchesHuggingFaceOnEveryCase) {
  const std::string dir = test_data(std::string("spm/") + GetParam());
  const absl::StatusOr<Tokenizer> loaded = Tokenizer::from_file(dir + "/tokenizer.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tokenizer = *loaded;
  const std::vector<Case> cases = read_cases(dir + "/cases.jsonl");

  int encode_cases = 0;
  int fallback_cases = 0;
  int held_cases = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const std::string where = "case " + std::to_string(k + 1) + (c.text ? " text \"" + *c.text + "\"" : " (decode only)");
    if (c.text) {
      ++encode_cases;
      const std::vector<int32_t> ids = tokenizer.encode(*c.text);
      EXPECT_EQ(ids, c.ids) << where << "\n  ours:      " << describe(tokenizer, ids)
                            << "\n  reference: " << describe(tokenizer, c.ids);
      bool fallback = false;
      for (int32_t id : c.ids) fallback = fallback || tokenizer.token_text(id).value_or("").starts_with("<0x");
      fallback_cases += fallback ? 1 : 0;
    }
    EXPECT_EQ(tokenizer.decode(c.ids), c.decoded) << where << " ids " << describe(tokenizer, c.ids);
    EXPECT_EQ(tokenizer.decode(c.ids, /*skip_special=*/true), c.decoded_skip) << where << " (skip_special)";
    EXPECT_EQ(stream(tokenizer, c.ids, false), c.decoded) << where << " streamed, ids " << describe(tokenizer, c.ids);
    EXPECT_EQ(stream(tokenizer, c.ids, true), c.decoded_skip) << where << " streamed (skip_special)";

    StreamingDetokenizer detokenizer(tokenizer);
    for (int32_t id : c.ids) {
      detokenizer.push(id);
      if (detokenizer.pending_bytes() > 0) {
        ++held_cases;
        break;
      }
    }
  }
  EXPECT_GE(encode_cases, 200);
  EXPECT_GE(cases.size() - encode_cases, 20u);
  EXPECT_GE(fallback_cases, 50) << "too few cases exercise byte fallback";
  EXPECT_GT(held_cases, 0) << "no byte run was ever held back while streaming";
  std::cout << GetParam() << ": " << encode_cases << " encode cases (" << fallback_cases << " with byte fallback), "
            << cases.size() - encode_cases << " decode-only cases\n";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, SpmStyle, ::testing::Values("llama2_style", "mistral_style", "metaspace_split"));

const Tokenizer& llama2() {
  static const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_file(test_data("spm/llama2_style/tokenizer.json"));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return *tokenizer;
}

int32_t id_of(const Tokenizer& tokenizer, const std::string& token) {
  const std::optional<int32_t> id = tokenizer.token_id(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

TEST(SpmTokenizer, ByteFallbackAndTokenBytes) {
  const Tokenizer& t = llama2();
  // Llama 2's layout: <unk> <s> </s>, then the 256 byte tokens.
  EXPECT_EQ(id_of(t, "<unk>"), 0);
  EXPECT_EQ(id_of(t, "<0x00>"), 3);
  EXPECT_EQ(id_of(t, "<0xFF>"), 258);
  // U+4E2D is E4 B8 AD: never seen in training, so three byte tokens after the prepended "▁".
  EXPECT_EQ(t.encode("中"), (std::vector<int32_t>{id_of(t, "▁"), 3 + 0xE4, 3 + 0xB8, 3 + 0xAD}));
  EXPECT_EQ(t.token_bytes(3 + 0x41), "A");
  EXPECT_EQ(t.token_bytes(id_of(t, "▁")), " ");
  EXPECT_EQ(t.token_bytes(1), "<s>");
}

TEST(SpmTokenizer, StreamingHoldsAByteRunAndStripsOnlyTheFirstSpace) {
  const Tokenizer& t = llama2();
  StreamingDetokenizer stream(t);
  const int32_t space = id_of(t, "▁");
  EXPECT_EQ(stream.push(space), "");  // the leading space of the text is stripped
  EXPECT_EQ(stream.push(3 + 0xE4), "");
  EXPECT_EQ(stream.pending_bytes(), 1u);
  EXPECT_EQ(stream.push(3 + 0xB8), "");
  EXPECT_EQ(stream.push(3 + 0xAD), "");
  EXPECT_EQ(stream.pending_bytes(), 3u);
  // The run ends with the next token that is not a byte; only then is it known to be valid.
  EXPECT_EQ(stream.push(space), "中 ");
  EXPECT_EQ(stream.push(space), " ");  // later spaces are kept
  EXPECT_EQ(stream.push(3 + 0xFF), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  // A new stream starts the text again.
  EXPECT_EQ(stream.push(space), "");
  EXPECT_EQ(stream.push(3 + 0x41), "");
  EXPECT_EQ(stream.flush(), "A");
  // An invalid run: one U+FFFD per byte, even for the valid character inside it.
  const std::vector<int32_t> ids = {3 + 0xE4, 3 + 0xB8, 3 + 0xAD, 3 + 0xFF, space};
  EXPECT_EQ(t.decode(ids), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD ");
}

std::string write_file(const std::string& name, const std::string& contents) {
  const std::string dir = work_path("spm_tokenizer_errors");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  return path;
}

void expect_error(const std::string& name, const json& spec, std::initializer_list<std::string> parts) {
  const std::string path = write_file(name, spec.dump());
  const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_file(path);
  ASSERT_FALSE(tokenizer.ok()) << name << " loaded";
  const std::string message(tokenizer.status().message());
  EXPECT_NE(message.find(path), std::string::npos) << message;
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

json llama2_json() {
  std::ifstream in(test_data("spm/llama2_style/tokenizer.json"), std::ios::binary);
  return json::parse(in);
}

// Other decoder chains over the Llama 2 style vocabulary (Strip with start 2 / stop 1 after Fuse,
// per-token Strip, Metaspace alone and with "never", Replace of two characters, no Strip), against
// Hugging Face's decode of arbitrary id sequences.
TEST(SpmTokenizer, DecoderVariantsMatchHuggingFace) {
  std::ifstream in(test_data("spm/decoder_variants.jsonl"), std::ios::binary);
  ASSERT_TRUE(in.good());
  std::string line;
  std::map<std::string, Tokenizer> by_decoder;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json record = json::parse(line);
    const std::string decoder = record["decoder"].dump();
    auto it = by_decoder.find(decoder);
    if (it == by_decoder.end()) {
      json spec = llama2_json();
      spec["decoder"] = record["decoder"];
      const std::string path = write_file("variant_" + std::to_string(by_decoder.size()) + ".json", spec.dump());
      absl::StatusOr<Tokenizer> loaded = Tokenizer::from_file(path);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      it = by_decoder.emplace(decoder, std::move(*loaded)).first;
    }
    const Tokenizer& t = it->second;
    const std::vector<int32_t> ids = record["ids"].get<std::vector<int32_t>>();
    const std::string expected = record["decoded"].get<std::string>();
    EXPECT_EQ(t.decode(ids), expected) << "decoder " << decoder << "\n  ids " << describe(t, ids);
    EXPECT_EQ(stream(t, ids, false), expected) << "streamed, decoder " << decoder << "\n  ids " << describe(t, ids);
    ++cases;
  }
  EXPECT_EQ(by_decoder.size(), 6u);
  EXPECT_GE(cases, 100);
}

TEST(SpmTokenizerErrors, UnsupportedOrMalformedComponentsNameTheField) {
  json j = llama2_json();
  j["decoder"]["decoders"][0] = {{"type", "CTC"}};
  expect_error("decoder_ctc.json", j, {"decoder type \"CTC\"", "not supported"});
  j = llama2_json();
  j["decoder"]["decoders"][0]["pattern"] = {{"Regex", "\\s"}};
  expect_error("decoder_replace_regex.json", j, {"decoder Replace pattern", "Regex"});
  j = llama2_json();
  j["decoder"]["decoders"][3]["content"] = "";
  expect_error("decoder_strip_content.json", j, {"decoder Strip", "\"content\""});
  j = llama2_json();
  j["decoder"]["decoders"][3]["start"] = -1;
  expect_error("decoder_strip_start.json", j, {"decoder Strip", "\"start\"", "-1"});
  j = llama2_json();
  j["decoder"]["decoders"].push_back({{"type", "Metaspace"}, {"replacement", "▁"}});
  expect_error("decoder_metaspace_after_fuse.json", j, {"decoder Metaspace after Fuse"});
  j = llama2_json();
  j["decoder"]["decoders"].push_back({{"type", "ByteLevel"}});
  expect_error("decoder_byte_level_in_sequence.json", j, {"decoder ByteLevel", "alone"});
  j = llama2_json();
  j["decoder"] = nullptr;
  expect_error("decoder_null.json", j, {"decoder is null"});
  j = llama2_json();
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
  expect_error("normalizer_replace_regex.json", j, {"normalizer Replace pattern", "Regex"});
  j = llama2_json();
  j["normalizer"]["normalizers"][0] = {{"type", "Lowercase"}};
  expect_error("normalizer_lowercase.json", j, {"normalizer type \"Lowercase\"", "not supported"});
  j = llama2_json();
  j["normalizer"]["normalizers"][0].erase("prepend");
  expect_error("normalizer_prepend.json", j, {"normalizer Prepend", "\"prepend\""});
  j = llama2_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "sometimes"}};
  expect_error("metaspace_scheme.json", j, {"Metaspace prepend_scheme", "sometimes"});
  j = llama2_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "__"}};
  expect_error("metaspace_replacement.json", j, {"Metaspace replacement", "one character"});
  j = llama2_json();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Metaspace"}}, {{"type", "Digits"}}}}};
  expect_error("metaspace_in_sequence.json", j, {"Metaspace", "only alone"});
  j = llama2_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error("pre_whitespace.json", j, {"pre-tokenizer type \"Whitespace\"", "not supported"});
  j = llama2_json();
  j["model"]["byte_fallback"] = "yes";
  expect_error("byte_fallback_string.json", j, {"\"byte_fallback\"", "true or false"});
  j = llama2_json();
  j["model"]["unk_token"] = "<nope>";
  expect_error("unk_missing.json", j, {"model.unk_token", "<nope>"});
}

}  // namespace
}  // namespace exl3
