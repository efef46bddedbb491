// JSON file reading and typed field access with errors naming the file (see json_file.h).
#include "coordinator/tokenizer/json_file.h"
#include "kernels/check.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::StatusOr<nlohmann::json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
    return json_error(path, absl::StrCat("malformed JSON: ", e.what()));
  }
}

absl::Status json_error(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

absl::StatusOr<std::optional<bool>> optional_bool(const nlohmann::json& object, const std::string& key,
                                                  const std::string& file) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) return json_error(file, absl::StrCat("\"", key, "\" must be true or false"));
  return std::optional<bool>(it->get<bool>());
}

absl::StatusOr<std::optional<std::string>> optional_string(const nlohmann::json& object,
                                                           const std::string& key, const std::string& file) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return json_error(file, absl::StrCat("\"", key, "\" must be a string"));
  return std::optional<std::string>(it->get<std::string>());
}

absl::StatusOr<int32_t> token_id_value(const nlohmann::json& value, const std::string& what,
                                       const std::string& file) {
  if (!value.is_number_integer()) {
    return json_error(file, absl::StrCat(what, " must be an integer, not ", value.dump()));
  }
  const bool in_range =
      value.is_number_unsigned()
          ? value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
          : value.get<int64_t>() >= 0 && value.get<int64_t>() <= std::numeric_limits<int32_t>::max();
  if (!in_range) return json_error(file, absl::StrCat(what, " ", value.dump(), " is not a valid token id"));
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace exl3
