// NFC normalization through utf8proc, and parsing of the normalizer spec (see normalizer.h).
#include "coordinator/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
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

absl::Status check_nfc(const json& spec, const std::string& file) {
  const std::string type = spec.is_object() && spec.value("type", json()).is_string()
                               ? spec.at("type").get<std::string>()
                               : spec.dump();
  if (type != "NFC") {
    return json_error(file, absl::StrCat("normalizer type \"", type, "\" is not supported (supported: NFC)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Normalizer> Normalizer::from_json(const json& spec, const std::string& file) {
  Normalizer result;
  if (spec.is_null()) return result;
  if (spec.is_object() && spec.value("type", json()) == "Sequence") {
    const auto list = spec.find("normalizers");
    if (list == spec.end() || !list->is_array()) {
      return json_error(file, "normalizer Sequence needs a \"normalizers\" list");
    }
    for (const json& step : *list) {
      EXL3_RETURN_IF_ERROR(check_nfc(step, file));
      result.nfc_ = true;
    }
    return result;
  }
  EXL3_RETURN_IF_ERROR(check_nfc(spec, file));
  result.nfc_ = true;
  return result;
}

std::string Normalizer::apply(std::string_view text) const {
  if (!nfc_) return std::string(text);
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

}  // namespace exl3
