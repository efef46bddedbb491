// Loading tokenizer.json into a Tokenizer, and the encode/decode pipelines (see tokenizer.h).
#include "coordinator/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/byte_level.h"
#include "coordinator/tokenizer/json_file.h"
#include "coordinator/tokenizer/utf8.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

// Ids index dense tables, so a stray huge id must not turn into a huge allocation. The largest
// vocabularies in use have about 260k entries.
constexpr int32_t kMaxTokenId = (1 << 24) - 1;

const json& field(const json& object, const std::string& key) {
  static const json kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// The id a TemplateProcessing post-processor puts first for a single sequence, if it starts with
// a special token of exactly one id. Other post-processors add nothing at the start.
std::optional<int32_t> template_first_id(const json& post_processor) {
  if (!post_processor.is_object()) return std::nullopt;
  const json& type = field(post_processor, "type");
  if (type == "Sequence") {
    const json& list = field(post_processor, "processors");
    if (!list.is_array()) return std::nullopt;
    for (const json& step : list) {
      if (std::optional<int32_t> id = template_first_id(step)) return id;
    }
    return std::nullopt;
  }
  if (type != "TemplateProcessing") return std::nullopt;
  const json& single = field(post_processor, "single");
  if (!single.is_array() || single.empty()) return std::nullopt;
  const json& name = field(field(single[0], "SpecialToken"), "id");
  if (!name.is_string()) return std::nullopt;
  const json& ids = field(field(field(post_processor, "special_tokens"), name.get<std::string>()), "ids");
  if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer()) return std::nullopt;
  const int64_t id = ids[0].get<int64_t>();
  if (id < 0 || id > kMaxTokenId) return std::nullopt;
  return static_cast<int32_t>(id);
}

// What a token stands for (see token_bytes): with ByteLevel, the bytes its characters stand for,
// or, for a token with a character outside that alphabet (possible for added tokens), its text
// as it is; with a decoder chain, the chain's view of one token in the middle of a text.
std::string token_bytes_of(const Decoder& decoder, const std::string& text) {
  if (!decoder.byte_level()) return decoder.token_text_in_context(text);
  std::optional<std::string> bytes = byte_level::decode(text);
  return bytes ? std::move(*bytes) : text;
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  EXL3_ASSIGN_OR_RETURN(const json root, read_json_file(path));
  if (!root.is_object()) return json_error(path, "the top level must be an object");
  Tokenizer t;
  try {
    EXL3_ASSIGN_OR_RETURN(t.pre_tokenizer_, PreTokenizer::from_json(field(root, "pre_tokenizer"), path));
    EXL3_ASSIGN_OR_RETURN(t.model_, BpeModel::from_json(field(root, "model"), t.pre_tokenizer_.byte_level(), path));
    EXL3_ASSIGN_OR_RETURN(t.normalizer_, Normalizer::from_json(field(root, "normalizer"), path));
    EXL3_ASSIGN_OR_RETURN(t.decoder_, Decoder::from_json(field(root, "decoder"), path));
    EXL3_ASSIGN_OR_RETURN(std::vector<AddedToken> added, parse_added_tokens(field(root, "added_tokens"), path));

    int32_t max_id = -1;
    for (const auto& [text, id] : t.model_.vocab()) max_id = std::max(max_id, id);
    for (const AddedToken& token : added) max_id = std::max(max_id, token.id);
    if (max_id > kMaxTokenId) {
      return json_error(path, absl::StrCat("token id ", max_id, " is larger than the supported ", kMaxTokenId));
    }
    t.tokens_.resize(static_cast<size_t>(max_id) + 1);
    for (const auto& [text, id] : t.model_.vocab()) {
      TokenInfo& info = t.tokens_[id];
      info.text = text;
      info.bytes = token_bytes_of(t.decoder_, text);
      info.present = true;
    }

    std::vector<AddedToken> raw;
    std::vector<AddedToken> normalized;
    for (AddedToken& token : added) {
      TokenInfo& info = t.tokens_[token.id];
      info.text = token.content;
      info.bytes = token_bytes_of(t.decoder_, token.content);
      info.present = true;
      info.special = token.special;
      t.added_by_content_.emplace(token.content, token.id);
      if (token.normalized && !t.normalizer_.is_identity()) {
        // Matched in normalized text, so its content is normalized the same way.
        token.content = t.normalizer_.apply(token.content);
        normalized.push_back(std::move(token));
      } else {
        raw.push_back(std::move(token));
      }
    }
    t.raw_added_ = AddedTokenMatcher(std::move(raw));
    t.normalized_added_ = AddedTokenMatcher(std::move(normalized));
    t.template_first_id_ = template_first_id(field(root, "post_processor"));
  } catch (const json::exception& e) {
    return json_error(path, absl::StrCat("unexpected structure: ", e.what()));
  }
  return t;
}

void Tokenizer::encode_plain(std::string_view text, bool first, RegexScratch& scratch,
                             StringMap<std::vector<int32_t>>& cache, std::vector<int32_t>& out) const {
  std::vector<std::string> words;
  pre_tokenizer_.split(text, first, scratch, words);
  for (std::string& word : words) {
    const auto hit = cache.find(word);
    if (hit != cache.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      continue;
    }
    std::vector<int32_t> ids;
    model_.encode(word, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    cache.emplace(std::move(word), std::move(ids));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  RegexScratch scratch;
  // Pre-tokens repeat a lot in text ("the", " of"); each distinct one is merged once per call.
  StringMap<std::vector<int32_t>> cache;
  std::vector<AddedTokenMatcher::Segment> segments;
  std::vector<AddedTokenMatcher::Segment> inner;
  raw_added_.split(text, parse_special, segments);
  for (const AddedTokenMatcher::Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    const std::string_view piece = text.substr(segment.begin, segment.end - segment.begin);
    const bool first = segment.begin == 0;
    if (normalizer_.is_identity()) {
      encode_plain(piece, first, scratch, cache, ids);
      continue;
    }
    const std::string normalized = normalizer_.apply(piece);
    inner.clear();
    normalized_added_.split(normalized, parse_special, inner);
    for (const AddedTokenMatcher::Segment& part : inner) {
      if (part.id >= 0) {
        ids.push_back(part.id);
      } else {
        // Text after an added token found in normalized text does not start the input.
        encode_plain(std::string_view(normalized).substr(part.begin, part.end - part.begin), first && part.begin == 0,
                     scratch, cache, ids);
      }
    }
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  if (!decoder_.byte_level()) {
    std::string text;
    DecodeStream stream(decoder_);
    for (int32_t id : ids) {
      if (!has_token(id) || (skip_special && tokens_[id].special)) continue;
      stream.push(tokens_[id].text, text);
    }
    stream.finish(text);
    return text;
  }
  std::string bytes;
  for (int32_t id : ids) {
    if (!has_token(id) || (skip_special && tokens_[id].special)) continue;
    bytes += tokens_[id].bytes;
  }
  return utf8::lossy(bytes);
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!has_token(id)) return {};
  return tokens_[id].bytes;
}

std::optional<std::string_view> Tokenizer::token_text(int32_t id) const {
  if (!has_token(id)) return std::nullopt;
  return std::string_view(tokens_[id].text);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  const auto it = added_by_content_.find(text);
  if (it != added_by_content_.end()) return it->second;
  return model_.find(text);
}

}  // namespace exl3
