// Tokenizer::from_model_dir: tokenizer.json plus the BOS/EOS facts spread over
// tokenizer_config.json, config.json and generation_config.json (see tokenizer.h).
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/json_file.h"
#include "kernels/check.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

// The parsed file, or null when it does not exist.
absl::StatusOr<json> read_optional(const std::string& path) {
  if (!std::filesystem::exists(path)) return json();
  EXL3_ASSIGN_OR_RETURN(json j, read_json_file(path));
  if (!j.is_object()) return json_error(path, "the top level must be an object");
  return j;
}

// tokenizer_config.json's "bos_token"/"eos_token": a string, {"content": ...} or null.
absl::StatusOr<std::optional<int32_t>> config_token(const Tokenizer& tokenizer, const json& config,
                                                    const std::string& key, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<int32_t>();
  const json* content = &*it;
  if (it->is_object()) {
    const auto inner = it->find("content");
    if (inner == it->end()) return json_error(path, absl::StrCat("\"", key, "\" has no \"content\""));
    content = &*inner;
  }
  if (!content->is_string()) {
    return json_error(path, absl::StrCat("\"", key, "\" must be a string or {\"content\": ...}"));
  }
  const std::string& text = content->get_ref<const std::string&>();
  const std::optional<int32_t> id = tokenizer.token_id(text);
  if (!id) return json_error(path, absl::StrCat("\"", key, "\" \"", text, "\" is not a token of tokenizer.json"));
  return id;
}

// config.json / generation_config.json "bos_token_id"/"eos_token_id": an int, a list or null.
absl::StatusOr<std::vector<int32_t>> config_ids(const Tokenizer& tokenizer, const json& config,
                                                const std::string& key, const std::string& path) {
  std::vector<int32_t> ids;
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return ids;
  const json list = it->is_array() ? *it : json::array({*it});
  for (const json& value : list) {
    EXL3_ASSIGN_OR_RETURN(const int32_t id, token_id_value(value, absl::StrCat("\"", key, "\""), path));
    if (!tokenizer.has_token(id)) {
      return json_error(path, absl::StrCat("\"", key, "\" ", id, " is not a token of tokenizer.json (",
                                           tokenizer.vocab_size(), " ids)"));
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::from_model_dir(const std::string& dir) {
  const std::filesystem::path base(dir);
  EXL3_ASSIGN_OR_RETURN(Tokenizer tokenizer, from_file((base / "tokenizer.json").string()));
  const std::string tokenizer_config_path = (base / "tokenizer_config.json").string();
  const std::string config_path = (base / "config.json").string();
  const std::string generation_config_path = (base / "generation_config.json").string();
  EXL3_ASSIGN_OR_RETURN(const json tokenizer_config, read_optional(tokenizer_config_path));
  EXL3_ASSIGN_OR_RETURN(const json config, read_optional(config_path));
  EXL3_ASSIGN_OR_RETURN(const json generation_config, read_optional(generation_config_path));

  EXL3_ASSIGN_OR_RETURN(tokenizer.bos_id_, config_token(tokenizer, tokenizer_config, "bos_token", tokenizer_config_path));
  for (const auto& [file, path] : {std::pair{&generation_config, &generation_config_path},
                                   std::pair{&config, &config_path}}) {
    if (tokenizer.bos_id_) break;
    EXL3_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, config_ids(tokenizer, *file, "bos_token_id", *path));
    if (ids.size() > 1) return json_error(*path, "\"bos_token_id\" must be one id, not a list");
    if (!ids.empty()) tokenizer.bos_id_ = ids[0];
  }

  EXL3_ASSIGN_OR_RETURN(const std::optional<int32_t> eos, config_token(tokenizer, tokenizer_config, "eos_token", tokenizer_config_path));
  if (eos) tokenizer.eos_ids_.insert(*eos);
  for (const auto& [file, path] : {std::pair{&config, &config_path},
                                   std::pair{&generation_config, &generation_config_path}}) {
    EXL3_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, config_ids(tokenizer, *file, "eos_token_id", *path));
    tokenizer.eos_ids_.insert(ids.begin(), ids.end());
  }

  EXL3_ASSIGN_OR_RETURN(const std::optional<bool> add_bos,
                        optional_bool(tokenizer_config, "add_bos_token", tokenizer_config_path));
  if (add_bos) {
    tokenizer.add_bos_ = *add_bos;
    if (*add_bos && !tokenizer.bos_id_) {
      return json_error(tokenizer_config_path, "\"add_bos_token\" is true but no BOS token is defined");
    }
  } else {
    tokenizer.add_bos_ = tokenizer.bos_id_ && tokenizer.template_first_id_ == tokenizer.bos_id_;
  }
  return tokenizer;
}

}  // namespace exl3
