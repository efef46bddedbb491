// Parsing and the two directions of the Metaspace component (see metaspace.h).
#include "coordinator/tokenizer/metaspace.h"

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/json_file.h"
#include "coordinator/tokenizer/utf8.h"
#include "kernels/check.h"

namespace exl3 {

absl::StatusOr<Metaspace> Metaspace::from_json(const nlohmann::json& spec, const std::string& where,
                                               const std::string& file) {
  Metaspace m;
  EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> replacement, optional_string(spec, "replacement", file));
  if (replacement) {
    const bool one_char = !replacement->empty() && utf8::step(*replacement, 0).kind == utf8::StepKind::kValid &&
                          utf8::step(*replacement, 0).length == replacement->size();
    if (!one_char) {
      return json_error(file, absl::StrCat(where, " Metaspace replacement \"", *replacement,
                                           "\" must be exactly one character"));
    }
    m.replacement = *replacement;
  }
  EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> scheme, optional_string(spec, "prepend_scheme", file));
  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> add_prefix_space, optional_bool(spec, "add_prefix_space", file));
  if (scheme) {
    if (*scheme == "always") {
      m.prepend_scheme = PrependScheme::kAlways;
    } else if (*scheme == "first") {
      m.prepend_scheme = PrependScheme::kFirst;
    } else if (*scheme == "never") {
      m.prepend_scheme = PrependScheme::kNever;
    } else {
      return json_error(file, absl::StrCat(where, " Metaspace prepend_scheme \"", *scheme,
                                           "\" is not supported (always, first, never)"));
    }
  } else if (add_prefix_space) {
    m.prepend_scheme = *add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> split, optional_bool(spec, "split", file));
  m.split = split.value_or(true);
  return m;
}

void Metaspace::pre_tokenize(std::string_view text, bool first, std::vector<std::string>& out) const {
  std::string replaced;
  replaced.reserve(text.size() + replacement.size());
  const bool starts_with_space = !text.empty() && text.front() == ' ';
  const bool prepend = !starts_with_space && (prepend_scheme == PrependScheme::kAlways ||
                                              (prepend_scheme == PrependScheme::kFirst && first));
  // A text that already starts with the replacement character gets none in front.
  if (prepend && text.substr(0, replacement.size()) != replacement) replaced.append(replacement);
  for (char ch : text) {
    if (ch == ' ') {
      replaced.append(replacement);
    } else {
      replaced.push_back(ch);
    }
  }
  if (!split) {
    out.push_back(std::move(replaced));
    return;
  }
  size_t begin = 0;
  for (size_t pos = replaced.find(replacement, 1); pos != std::string::npos;
       pos = replaced.find(replacement, pos + replacement.size())) {
    out.push_back(replaced.substr(begin, pos - begin));
    begin = pos;
  }
  if (begin < replaced.size()) out.push_back(replaced.substr(begin));
}

std::string Metaspace::decode_token(std::string_view token, size_t index) const {
  const bool drop = index == 0 && prepend_scheme != PrependScheme::kNever;
  std::string out;
  out.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    if (token.substr(pos, replacement.size()) == replacement) {
      if (!drop) out.push_back(' ');
      pos += replacement.size();
    } else {
      out.push_back(token[pos]);
      ++pos;
    }
  }
  return out;
}

}  // namespace exl3
