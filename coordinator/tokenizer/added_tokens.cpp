// Parsing of "added_tokens" and the trie-based matcher (see added_tokens.h).
#include "coordinator/tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/json_file.h"
#include "kernels/check.h"
#include "coordinator/tokenizer/string_map.h"
#include "coordinator/tokenizer/utf8.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

struct Char {
  size_t begin;
  size_t end;
  char32_t code_point;
};

// The well-formed character that starts at `pos`, if any.
std::optional<Char> char_at(std::string_view text, size_t pos) {
  if (pos >= text.size()) return std::nullopt;
  const utf8::Step st = utf8::step(text, pos);
  if (st.kind != utf8::StepKind::kValid) return std::nullopt;
  return Char{pos, pos + st.length, utf8::decode(text, pos, st.length)};
}

// The well-formed character that ends at `pos`, if any.
std::optional<Char> char_before(std::string_view text, size_t pos) {
  for (size_t length = 1; length <= 4 && length <= pos; ++length) {
    const std::optional<Char> c = char_at(text, pos - length);
    if (c && c->end == pos) return c;
  }
  return std::nullopt;
}

// Rust's `c.is_alphanumeric() || c == '_'`: letters, numbers and the underscore.
bool is_word_char(char32_t c) {
  if (c == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<bool> flag(const json& entry, const std::string& key, bool fallback, const std::string& file) {
  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> value, optional_bool(entry, key, file));
  return value.value_or(fallback);
}

}  // namespace

absl::StatusOr<std::vector<AddedToken>> parse_added_tokens(const json& list, const std::string& file) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  if (!list.is_array()) return json_error(file, "\"added_tokens\" must be a list");
  StringMap<int32_t> by_content;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!entry.is_object()) return json_error(file, absl::StrCat(where, " must be an object"));
    AddedToken token;
    const auto id = entry.find("id");
    if (id == entry.end()) return json_error(file, absl::StrCat(where, " has no \"id\""));
    EXL3_ASSIGN_OR_RETURN(token.id, token_id_value(*id, absl::StrCat(where, ".id"), file));
    EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> content, optional_string(entry, "content", file));
    if (!content || content->empty()) {
      return json_error(file, absl::StrCat(where, " needs a non-empty \"content\""));
    }
    token.content = *content;
    EXL3_ASSIGN_OR_RETURN(token.special, flag(entry, "special", false, file));
    EXL3_ASSIGN_OR_RETURN(token.lstrip, flag(entry, "lstrip", false, file));
    EXL3_ASSIGN_OR_RETURN(token.rstrip, flag(entry, "rstrip", false, file));
    EXL3_ASSIGN_OR_RETURN(token.single_word, flag(entry, "single_word", false, file));
    EXL3_ASSIGN_OR_RETURN(token.normalized, flag(entry, "normalized", !token.special, file));
    const auto [it, inserted] = by_content.emplace(token.content, token.id);
    if (!inserted && it->second != token.id) {
      return json_error(file, absl::StrCat(where, " \"", token.content, "\" repeats the content of id ", it->second));
    }
    if (inserted) tokens.push_back(std::move(token));
  }
  return tokens;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  node_token_.push_back(-1);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;
    int32_t node = 0;
    for (char ch : content) {
      const auto [it, inserted] =
          edges_.emplace(edge_key(node, static_cast<unsigned char>(ch)), static_cast<int32_t>(node_token_.size()));
      if (inserted) node_token_.push_back(-1);
      node = it->second;
    }
    if (node_token_[node] < 0) node_token_[node] = static_cast<int32_t>(t);
    first_byte_[static_cast<unsigned char>(content[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_match(std::string_view text, size_t pos, size_t& end) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t k = pos; k < text.size(); ++k) {
    const auto it = edges_.find(edge_key(node, static_cast<unsigned char>(text[k])));
    if (it == edges_.end()) break;
    node = it->second;
    if (node_token_[node] >= 0) {
      best = node_token_[node];
      end = k + 1;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Segment>& out) const {
  size_t plain_begin = 0;  // start of the plain text not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t stop = 0;
    const int32_t t = longest_match(text, pos, stop);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    size_t start = pos;
    pos = stop;
    if (token.special && !parse_special) continue;
    if (token.single_word) {
      const std::optional<Char> before = char_before(text, start);
      const std::optional<Char> after = char_at(text, stop);
      if ((before && is_word_char(before->code_point)) || (after && is_word_char(after->code_point))) continue;
    }
    if (token.lstrip) {
      for (std::optional<Char> c = char_before(text, start); c && start > plain_begin && utf8::is_white_space(c->code_point);
           c = char_before(text, start)) {
        start = c->begin;
      }
      start = std::max(start, plain_begin);
    }
    if (token.rstrip) {
      for (std::optional<Char> c = char_at(text, stop); c && utf8::is_white_space(c->code_point); c = char_at(text, stop)) {
        stop = c->end;
      }
      pos = stop;
    }
    if (start > plain_begin) out.push_back({plain_begin, start, -1});
    out.push_back({start, stop, token.id});
    plain_begin = stop;
  }
  if (plain_begin < text.size()) out.push_back({plain_begin, text.size(), -1});
}

}  // namespace exl3
