// Building tokenizer.json / tokenizer_config.json from GGUF metadata (see tokenizer_writer.h).
#include "import/tokenizer_writer.h"

#include <algorithm>
#include <array>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "import/pre_tokenizer_table.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kTypeUnknown = 2;
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
size_t utf8_char_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

// Byte offsets of the code point boundaries of valid UTF-8 `s` (0 and s.size() included), or
// nullopt when `s` is not valid UTF-8.
std::optional<std::vector<size_t>> char_boundaries(const std::string& s) {
  std::vector<size_t> out{0};
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_char_length(s, i);
    if (n == 0) return std::nullopt;
    i += n;
    out.push_back(i);
  }
  return out;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's byte alphabet: byte b is spelled as code point kByteChar[b].
std::array<uint32_t, 256> byte_alphabet() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map[b] = printable ? b : next++;
  }
  return map;
}

// Whether every character of `token` belongs to the byte alphabet; else `token`'s UTF-8 bytes
// spelled in it.
bool in_byte_alphabet(const std::string& token, const std::vector<bool>& alphabet) {
  for (size_t i = 0; i < token.size();) {
    const size_t n = utf8_char_length(token, i);
    uint32_t cp = static_cast<uint8_t>(token[i]);
    if (n == 2) cp = ((cp & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
    if (n != 1 && n != 2) return false;  // the alphabet lies below U+0144
    if (cp >= alphabet.size() || !alphabet[cp]) return false;
    i += n;
  }
  return true;
}

std::string spell_bytes(const std::string& token, const std::array<uint32_t, 256>& map) {
  std::string out;
  for (const char c : token) append_utf8(map[static_cast<uint8_t>(c)], out);
  return out;
}

json added_token(int64_t id, const std::string& content, bool special) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", special}};
}

absl::StatusOr<std::optional<int64_t>> optional_id(const GgufFile& f, const std::string& key, int64_t vocab) {
  if (f.find(key) == nullptr) return std::optional<int64_t>();
  EXL3_ASSIGN_OR_RETURN(const int64_t id, f.get_int(key));
  if (id < 0 || id >= vocab) {
    return absl::InvalidArgumentError(absl::StrCat(f.source(), ": metadata '", key, "' = ", id,
                                                   " is not a token id (vocabulary of ", vocab, ")"));
  }
  return std::optional<int64_t>(id);
}

absl::StatusOr<bool> optional_bool(const GgufFile& f, const std::string& key, bool def) {
  if (f.find(key) == nullptr) return def;
  return f.get_bool(key);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> merges_from_scores(const std::vector<std::string>& tokens,
                                                                    const std::vector<double>& scores) {
  EXL3_CHECK_EQ(tokens.size(), scores.size());
  // As Python dicts built from the lists: a repeated token keeps its last id and score, and its
  // first position in iteration order.
  std::unordered_map<std::string, size_t> id;
  std::unordered_map<std::string, double> score;
  std::vector<size_t> order;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (score.count(tokens[i]) == 0) order.push_back(i);
    id[tokens[i]] = i;
    score[tokens[i]] = scores[i];
  }
  struct Merge {
    std::string left, right;
    double score;
    size_t left_chars, right_chars;
  };
  std::vector<Merge> merges;
  for (const size_t i : order) {
    const std::string& token = tokens[i];
    const auto bounds = char_boundaries(token);
    if (!bounds) continue;  // refused earlier (invalid UTF-8)
    std::vector<Merge> local;
    for (size_t k = 1; k + 1 < bounds->size(); ++k) {
      std::string left = token.substr(0, (*bounds)[k]), right = token.substr((*bounds)[k]);
      if (id.count(left) != 0 && id.count(right) != 0) {
        local.push_back({std::move(left), std::move(right), score[token], k, bounds->size() - 1 - k});
      }
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      return std::pair(id[a.left], id[a.right]) < std::pair(id[b.left], id[b.right]);
    });
    for (Merge& m : local) merges.push_back(std::move(m));
  }
  // Python's sorted(..., reverse=True) is stable: equal keys keep their order.
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return std::tuple(a.score, a.left_chars, a.right_chars) > std::tuple(b.score, b.left_chars, b.right_chars);
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (Merge& m : merges) out.emplace_back(std::move(m.left), std::move(m.right));
  return out;
}

absl::StatusOr<TokenizerFiles> make_tokenizer_files(const GgufFile& f, int64_t context_length) {
  EXL3_ASSIGN_OR_RETURN(const std::string model, f.get_string("tokenizer.ggml.model"));
  EXL3_ASSIGN_OR_RETURN(const std::vector<std::string> tokens, f.get_string_array("tokenizer.ggml.tokens"));
  const int64_t vocab = static_cast<int64_t>(tokens.size());
  if (vocab == 0) return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.ggml.tokens is empty"));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!char_boundaries(tokens[i])) {
      return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.ggml.tokens[", i, "] is not valid UTF-8"));
    }
  }
  std::vector<int64_t> types(tokens.size(), 1);
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    EXL3_ASSIGN_OR_RETURN(types, f.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.ggml.token_type has ", types.size(),
                                                     " entries for ", tokens.size(), " tokens"));
    }
  }

  TokenizerFiles out;
  out.vocab_size = vocab;
  EXL3_ASSIGN_OR_RETURN(out.bos_id, optional_id(f, "tokenizer.ggml.bos_token_id", vocab));
  EXL3_ASSIGN_OR_RETURN(out.eos_id, optional_id(f, "tokenizer.ggml.eos_token_id", vocab));
  EXL3_ASSIGN_OR_RETURN(out.eot_id, optional_id(f, "tokenizer.ggml.eot_token_id", vocab));
  EXL3_ASSIGN_OR_RETURN(out.pad_id, optional_id(f, "tokenizer.ggml.padding_token_id", vocab));
  EXL3_ASSIGN_OR_RETURN(const std::optional<int64_t> unk_id, optional_id(f, "tokenizer.ggml.unknown_token_id", vocab));

  json tok = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"normalizer", nullptr}};
  json added = json::array();
  json bpe = {{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}};
  std::vector<std::string> spelled = tokens;  // the vocabulary as tokenizer.json spells it
  bool add_bos = false;
  size_t merge_count = 0;
  std::string pre_name;

  if (model == "gpt2") {
    EXL3_ASSIGN_OR_RETURN(pre_name, f.get_string("tokenizer.ggml.pre"));
    EXL3_ASSIGN_OR_RETURN(const ByteLevelPreTokenizer pre, byte_level_pre_tokenizer(pre_name));
    EXL3_ASSIGN_OR_RETURN(const std::vector<std::string> merges, f.get_string_array("tokenizer.ggml.merges"));
    const auto map = byte_alphabet();
    std::vector<bool> alphabet(324, false);
    for (const uint32_t cp : map) alphabet[cp] = true;
    std::vector<bool> spelled_ok(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      spelled_ok[i] = in_byte_alphabet(tokens[i], alphabet);
      if (!spelled_ok[i]) spelled[i] = spell_bytes(tokens[i], map);
    }
    json merge_list = json::array();
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t space = merges[i].find(' ');
      if (space == std::string::npos || merges[i].find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.ggml.merges[", i, "] \"", merges[i],
                                                       "\" is not two tokens separated by one space"));
      }
      if (!char_boundaries(merges[i])) {
        return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.ggml.merges[", i, "] is not valid UTF-8"));
      }
      merge_list.push_back(json::array({merges[i].substr(0, space), merges[i].substr(space + 1)}));
    }
    merge_count = merges.size();
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    bpe["ignore_merges"] = pre.ignore_merges;
    bpe["merges"] = std::move(merge_list);
    tok["pre_tokenizer"] = pre.pre_tokenizer;
    tok["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    // Control tokens spelled outside the byte alphabet are llama.cpp mislabels: not added.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (types[i] == kTypeControl && spelled_ok[i]) added.push_back(added_token(i, tokens[i], true));
      // transformers adds a user-defined token only when its text is a vocabulary entry.
      if (types[i] == kTypeUserDefined && spelled_ok[i]) added.push_back(added_token(i, tokens[i], false));
    }
    EXL3_ASSIGN_OR_RETURN(add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token", false));
  } else if (model == "llama") {
    EXL3_ASSIGN_OR_RETURN(const std::vector<double> scores, f.get_number_array("tokenizer.ggml.scores"));
    if (scores.size() != tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.ggml.scores has ", scores.size(),
                                                     " entries for ", tokens.size(), " tokens"));
    }
    // A float32 score, as transformers reads it, widened exactly.
    std::vector<double> f32_scores(scores.size());
    for (size_t i = 0; i < scores.size(); ++i) f32_scores[i] = static_cast<float>(scores[i]);
    json merge_list = json::array();
    for (auto& [l, r] : merges_from_scores(tokens, f32_scores)) merge_list.push_back(json::array({l, r}));
    merge_count = merge_list.size();
    EXL3_ASSIGN_OR_RETURN(const bool prefix_space, optional_bool(f, "tokenizer.ggml.add_space_prefix", true));
    bpe["unk_token"] = unk_id ? json(tokens[*unk_id]) : json(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    bpe["ignore_merges"] = false;
    bpe["merges"] = std::move(merge_list);
    tok["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                            {"prepend_scheme", prefix_space ? "first" : "never"}, {"split", false}};
    json steps = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                              {{"type", "ByteFallback"}},
                              {{"type", "Fuse"}}});
    if (prefix_space) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tok["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(steps)}};
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (types[i] == kTypeControl || types[i] == kTypeUnknown) added.push_back(added_token(i, tokens[i], true));
      if (types[i] == kTypeUserDefined) added.push_back(added_token(i, tokens[i], false));
    }
    EXL3_ASSIGN_OR_RETURN(add_bos, optional_bool(f, "tokenizer.ggml.add_bos_token", true));
    pre_name = "sentencepiece";
  } else {
    return absl::UnimplementedError(absl::StrCat(f.source(), ": tokenizer.ggml.model \"", model,
                                                 "\" is not supported by exl3-import (supported: gpt2, llama)"));
  }
  EXL3_ASSIGN_OR_RETURN(const bool add_eos, optional_bool(f, "tokenizer.ggml.add_eos_token", false));
  if (add_bos && !out.bos_id) {
    return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.ggml.add_bos_token is true but there is "
                                                   "no tokenizer.ggml.bos_token_id"));
  }

  // Python's dict from enumerate: a repeated spelling keeps its last id.
  json vocab_json = json::object();
  size_t repeated = 0;
  for (size_t i = 0; i < spelled.size(); ++i) {
    if (vocab_json.contains(spelled[i])) ++repeated;
    vocab_json[spelled[i]] = i;
  }
  bpe["vocab"] = std::move(vocab_json);
  tok["added_tokens"] = std::move(added);
  if (add_bos) {
    const std::string bos = tokens[*out.bos_id];
    tok["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", json::array({*out.bos_id})}, {"tokens", json::array({bos})}}}}}};
  } else {
    tok["post_processor"] = nullptr;
  }
  tok["model"] = std::move(bpe);
  out.tokenizer = std::move(tok);

  const auto token_or_null = [&](const std::optional<int64_t>& id) { return id ? json(tokens[*id]) : json(nullptr); };
  json config = {{"add_bos_token", add_bos},
                 {"add_eos_token", add_eos},
                 {"bos_token", token_or_null(out.bos_id)},
                 {"eos_token", token_or_null(out.eos_id)},
                 {"unk_token", token_or_null(unk_id)},
                 {"pad_token", token_or_null(out.pad_id)},
                 {"clean_up_tokenization_spaces", false},
                 {"model_max_length", context_length},
                 {"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (f.find("tokenizer.chat_template") != nullptr) {
    EXL3_ASSIGN_OR_RETURN(const std::string tmpl, f.get_string("tokenizer.chat_template"));
    if (!char_boundaries(tmpl)) {
      return absl::InvalidArgumentError(absl::StrCat(f.source(), ": tokenizer.chat_template is not valid UTF-8"));
    }
    config["chat_template"] = tmpl;
  }
  out.tokenizer_config = std::move(config);
  out.summary = absl::StrCat(model == "gpt2" ? "byte-level BPE" : "SentencePiece BPE", ", ", vocab, " tokens, ",
                             merge_count, " merges, pre-tokenizer \"", pre_name, "\"",
                             repeated != 0 ? absl::StrCat(", ", repeated, " repeated spellings (last id kept)") : "");
  return out;
}

}  // namespace exl3
