// The normalizer steps (NFC through utf8proc, Prepend, Replace) and parsing of the spec (see
// normalizer.h).
#include "coordinator/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/tokenizer/json_file.h"
#include "coordinator/tokenizer/utf8.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// NFC of well-formed UTF-8 (ASCII is already in NFC).
void append_nfc(std::string_view valid, std::string& out) {
  if (is_ascii(valid)) {
    out.append(valid);
    return;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                   static_cast<utf8proc_ssize_t>(valid.size()), &result,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  // The input was checked to be well-formed, so only allocation can fail here.
  EXL3_CHECK(n >= 0, "utf8proc NFC failed: ", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

std::string nfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t run_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const utf8::Step st = utf8::step(text, pos);
    if (st.kind != utf8::StepKind::kValid) {
      append_nfc(text.substr(run_begin, pos - run_begin), out);
      out.append(text.substr(pos, st.length));
      run_begin = pos + st.length;
    }
    pos += st.length;
  }
  append_nfc(text.substr(run_begin), out);
  return out;
}

}  // namespace

absl::StatusOr<Normalizer::Step> Normalizer::parse_step(const json& spec, const std::string& file) {
  const std::string type = spec.is_object() && spec.value("type", json()).is_string()
                               ? spec.at("type").get<std::string>()
                               : spec.dump();
  if (type == "NFC") return Step{Step::Kind::kNfc, "", ""};
  if (type == "Prepend") {
    EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> prepend, optional_string(spec, "prepend", file));
    if (!prepend) return json_error(file, "normalizer Prepend needs a string \"prepend\"");
    return Step{Step::Kind::kPrepend, "", *prepend};
  }
  if (type == "Replace") {
    const auto pattern = spec.find("pattern");
    if (pattern == spec.end() || !pattern->is_object() || !pattern->contains("String") ||
        !(*pattern)["String"].is_string()) {
      return json_error(file, absl::StrCat("normalizer Replace pattern ",
                                           pattern == spec.end() ? "(none)" : pattern->dump(),
                                           " is not supported (only {\"String\": ...})"));
    }
    const std::string text = (*pattern)["String"].get<std::string>();
    if (text.empty()) return json_error(file, "normalizer Replace with an empty pattern is not supported");
    EXL3_ASSIGN_OR_RETURN(const std::optional<std::string> content, optional_string(spec, "content", file));
    if (!content) return json_error(file, "normalizer Replace needs a string \"content\"");
    return Step{Step::Kind::kReplace, text, *content};
  }
  return json_error(file, absl::StrCat("normalizer type \"", type,
                                       "\" is not supported (supported: NFC, Prepend, Replace, Sequence)"));
}

absl::StatusOr<Normalizer> Normalizer::from_json(const json& spec, const std::string& file) {
  Normalizer result;
  if (spec.is_null()) return result;
  if (spec.is_object() && spec.value("type", json()) == "Sequence") {
    const auto list = spec.find("normalizers");
    if (list == spec.end() || !list->is_array()) {
      return json_error(file, "normalizer Sequence needs a \"normalizers\" list");
    }
    for (const json& step : *list) {
      EXL3_ASSIGN_OR_RETURN(Step parsed, parse_step(step, file));
      result.steps_.push_back(std::move(parsed));
    }
    return result;
  }
  EXL3_ASSIGN_OR_RETURN(Step parsed, parse_step(spec, file));
  result.steps_.push_back(std::move(parsed));
  return result;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kNfc:
        out = nfc(out);
        break;
      case Step::Kind::kPrepend:
        if (!out.empty()) out.insert(0, step.content);
        break;
      case Step::Kind::kReplace:
        out = absl::StrReplaceAll(out, {{step.pattern, step.content}});
        break;
    }
  }
  return out;
}

}  // namespace exl3
