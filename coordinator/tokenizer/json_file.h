// Reading the JSON files of a model directory, with errors that name the file and the field.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace exl3 {

// Parses the whole file. NotFound if it cannot be opened; InvalidArgument naming the file and the
// parser's message if it is not valid JSON.
absl::StatusOr<nlohmann::json> read_json_file(const std::string& path);

// InvalidArgument "<file>: <what>".
absl::Status json_error(const std::string& file, const std::string& what);

// Optional typed fields of an object: nullopt when the field is absent or null, an error naming
// file and field when it has another type.
absl::StatusOr<std::optional<bool>> optional_bool(const nlohmann::json& object, const std::string& key,
                                                  const std::string& file);
absl::StatusOr<std::optional<std::string>> optional_string(const nlohmann::json& object,
                                                           const std::string& key, const std::string& file);

// A JSON integer that fits in int32_t and is >= 0 (token ids).
absl::StatusOr<int32_t> token_id_value(const nlohmann::json& value, const std::string& what,
                                       const std::string& file);

}  // namespace exl3
