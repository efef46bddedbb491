// Loading and running the pre-tokenizer: Split / ByteLevel chains, Metaspace or none (see
// pre_tokenizer.h).
#include "coordinator/tokenizer/pre_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/json_file.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

// The pattern GPT-2's byte-level BPE splits words with (ByteLevel's use_regex): English
// contractions, letters, digits and other symbols each with an optional leading space, then
// whitespace (a run before a non-space leaves its last space to the next piece).
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string type_of(const json& spec) {
  const auto it = spec.find("type");
  if (it == spec.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

absl::StatusOr<RegexSplitter> parse_split(const json& spec, const std::string& file) {
  const auto pattern = spec.find("pattern");
  if (pattern == spec.end() || !pattern->is_object() || pattern->size() != 1) {
    return json_error(file, "pre-tokenizer Split needs \"pattern\": {\"Regex\": ...} or {\"String\": ...}");
  }
  const bool literal = pattern->contains("String");
  const json& text = literal ? (*pattern)["String"] : pattern->value("Regex", json());
  if (!text.is_string()) {
    return json_error(file, absl::StrCat("pre-tokenizer Split pattern ", pattern->dump(),
                                         " is not supported (expected Regex or String)"));
  }
  const auto behavior = spec.find("behavior");
  if (behavior == spec.end() || *behavior != "Isolated") {
    return json_error(file, absl::StrCat("pre-tokenizer Split behavior ",
                                         behavior == spec.end() ? "(none)" : behavior->dump(),
                                         " is not supported (only \"Isolated\")"));
  }
  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> invert, optional_bool(spec, "invert", file));
  if (invert.value_or(false)) return json_error(file, "pre-tokenizer Split with invert true is not supported");
  auto splitter = RegexSplitter::compile(text.get<std::string>(), literal);
  if (!splitter.ok()) return json_error(file, std::string(splitter.status().message()));
  return splitter;
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::from_json(const json& spec, const std::string& file) {
  PreTokenizer result;
  if (spec.is_null()) return result;
  if (!spec.is_object()) return json_error(file, "pre_tokenizer must be an object");
  std::vector<const json*> steps;
  if (type_of(spec) == "Sequence") {
    const auto list = spec.find("pretokenizers");
    if (list == spec.end() || !list->is_array()) {
      return json_error(file, "pre_tokenizer Sequence needs a \"pretokenizers\" list");
    }
    for (const json& step : *list) steps.push_back(&step);
  } else {
    steps.push_back(&spec);
  }

  if (steps.size() == 1 && steps[0]->is_object() && type_of(*steps[0]) == "Metaspace") {
    EXL3_ASSIGN_OR_RETURN(result.metaspace_, Metaspace::from_json(*steps[0], "pre-tokenizer", file));
    return result;
  }
  bool have_byte_level = false;
  for (const json* step : steps) {
    const std::string type = step->is_object() ? type_of(*step) : "";
    if (type == "Metaspace") {
      return json_error(file, "pre-tokenizer Metaspace is supported only alone (not in a Sequence with other steps)");
    }
    if (have_byte_level) {
      return json_error(file, absl::StrCat("pre-tokenizer \"", type,
                                           "\" after ByteLevel is not supported (ByteLevel must come last)"));
    }
    if (type == "Split") {
      EXL3_ASSIGN_OR_RETURN(RegexSplitter split, parse_split(*step, file));
      result.splits_.push_back(std::move(split));
    } else if (type == "ByteLevel") {
      have_byte_level = true;
      EXL3_ASSIGN_OR_RETURN(const std::optional<bool> prefix, optional_bool(*step, "add_prefix_space", file));
      EXL3_ASSIGN_OR_RETURN(const std::optional<bool> use_regex, optional_bool(*step, "use_regex", file));
      result.add_prefix_space_ = prefix.value_or(true);
      if (use_regex.value_or(true)) {
        EXL3_ASSIGN_OR_RETURN(RegexSplitter regex, RegexSplitter::compile(kGpt2Pattern, false));
        result.byte_level_regex_ = std::move(regex);
      }
    } else {
      return json_error(file, absl::StrCat("pre-tokenizer type \"", type,
                                           "\" is not supported (supported: ByteLevel, Split, Metaspace, Sequence)"));
    }
  }
  if (!have_byte_level) {
    if (result.splits_.empty()) return result;  // an empty Sequence: no pre-tokenization
    return json_error(file, "pre_tokenizer has Split steps but no ByteLevel step; Split is supported only before ByteLevel");
  }
  result.byte_level_ = true;
  return result;
}

void PreTokenizer::split(std::string_view text, bool first, RegexScratch& scratch,
                         std::vector<std::string>& out) const {
  if (text.empty()) return;
  if (metaspace_) {
    metaspace_->pre_tokenize(text, first, out);
    return;
  }
  std::vector<std::string_view> pieces{text};
  std::vector<std::string_view> next;
  for (const RegexSplitter& splitter : splits_) {
    next.clear();
    for (std::string_view piece : pieces) splitter.split(piece, scratch, next);
    pieces.swap(next);
  }
  std::string prefixed;
  std::vector<std::string_view> words;
  for (std::string_view piece : pieces) {
    if (add_prefix_space_ && piece.front() != ' ') {
      prefixed.assign(1, ' ').append(piece);
      piece = prefixed;
    }
    if (!byte_level_regex_) {
      out.emplace_back(piece);
      continue;
    }
    words.clear();
    byte_level_regex_->split(piece, scratch, words);
    for (std::string_view word : words) out.emplace_back(word);
  }
}

}  // namespace exl3
