// JSON-lines batch encoding (encode_jsonl, declared in tokenizer.h).
#include <istream>
#include <ostream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace exl3 {

absl::Status encode_jsonl(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, bool parse_special) {
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
      return absl::InvalidArgumentError(absl::StrCat("line ", number, ": malformed JSON: ", e.what()));
    }
    const auto text = record.is_object() ? record.find("text") : record.end();
    if (!record.is_object() || text == record.end() || !text->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": expected an object with a string field \"text\""));
    }
    const nlohmann::json ids = tokenizer.encode(text->get_ref<const std::string&>(), parse_special);
    out << nlohmann::json{{"ids", ids}}.dump() << '\n';
    if (!out) return absl::DataLossError(absl::StrCat("line ", number, ": cannot write the output"));
  }
  if (in.bad()) return absl::DataLossError("cannot read the input");
  return absl::OkStatus();
}

}  // namespace exl3
