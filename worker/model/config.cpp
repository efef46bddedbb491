// config.json parsing and validation for Llama-family models.
#include "worker/model/config.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using json = nlohmann::json;

// Upper bound of every integer field (sizes, counts, positions).
constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  absl::Status error(const std::string& field, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", field, " ", what));
  }

  absl::StatusOr<int64_t> get_int(const json& obj, const std::string& field, std::optional<int64_t> def,
                                  int64_t min_value) const {
    if (!obj.contains(field) || obj[field].is_null()) {
      if (def) return *def;
      return error(field, "is missing");
    }
    if (!obj[field].is_number_integer()) return error(field, "must be an integer");
    const int64_t v = obj[field].get<int64_t>();
    if (v < min_value) return error(field, absl::StrCat("must be >= ", min_value, " (got ", v, ")"));
    // No real model comes near this; larger values overflow derived sizes (rotary_dim()).
    if (v > kMaxInt) return error(field, absl::StrCat("must be <= ", kMaxInt, " (got ", v, ")"));
    return v;
  }

  absl::StatusOr<double> get_number(const json& obj, const std::string& field, std::optional<double> def) const {
    if (!obj.contains(field) || obj[field].is_null()) {
      if (def) return *def;
      return error(field, "is missing");
    }
    if (!obj[field].is_number()) return error(field, "must be a number");
    return obj[field].get<double>();
  }

  const json& root() const { return j_; }

 private:
  const json& j_;
  std::string source_;
};

absl::StatusOr<RopeConfig> parse_rope(const Reader& r, const json& root, int64_t max_pos) {
  RopeConfig rope;
  // transformers 5 writes only rope_parameters (with rope_theta inside); older files write a
  // top-level rope_theta and an optional rope_scaling object.
  const json* params = nullptr;
  if (root.contains("rope_parameters") && root["rope_parameters"].is_object()) {
    params = &root["rope_parameters"];
  } else if (root.contains("rope_scaling") && root["rope_scaling"].is_object()) {
    params = &root["rope_scaling"];
  }
  EXL3_ASSIGN_OR_RETURN(rope.theta, r.get_number(root, "rope_theta", 10000.0));
  if (params && params->contains("rope_theta")) {
    EXL3_ASSIGN_OR_RETURN(rope.theta, r.get_number(*params, "rope_theta", std::nullopt));
  }
  if (!(rope.theta > 0)) return r.error("rope_theta", "must be > 0");
  EXL3_ASSIGN_OR_RETURN(rope.partial_rotary_factor, r.get_number(root, "partial_rotary_factor", 1.0));
  if (params && params->contains("partial_rotary_factor")) {
    EXL3_ASSIGN_OR_RETURN(rope.partial_rotary_factor, r.get_number(*params, "partial_rotary_factor", 1.0));
  }
  if (!(rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1)) {
    return r.error("partial_rotary_factor", "must be in (0, 1]");
  }
  if (params == nullptr) return rope;

  std::string type = "default";
  if (params->contains("rope_type") && (*params)["rope_type"].is_string()) {
    type = (*params)["rope_type"].get<std::string>();
  } else if (params->contains("type") && (*params)["type"].is_string()) {
    type = (*params)["type"].get<std::string>();
  }
  const json& p = *params;
  if (type == "default") {
    rope.type = RopeType::kDefault;
  } else if (type == "linear") {
    rope.type = RopeType::kLinear;
    EXL3_ASSIGN_OR_RETURN(rope.factor, r.get_number(p, "factor", std::nullopt));
  } else if (type == "llama3") {
    rope.type = RopeType::kLlama3;
    EXL3_ASSIGN_OR_RETURN(rope.factor, r.get_number(p, "factor", std::nullopt));
    EXL3_ASSIGN_OR_RETURN(rope.low_freq_factor, r.get_number(p, "low_freq_factor", std::nullopt));
    EXL3_ASSIGN_OR_RETURN(rope.high_freq_factor, r.get_number(p, "high_freq_factor", std::nullopt));
    EXL3_ASSIGN_OR_RETURN(rope.original_max_position, r.get_int(p, "original_max_position_embeddings", std::nullopt, 1));
    if (!(rope.high_freq_factor > rope.low_freq_factor)) {
      return r.error("rope_parameters.high_freq_factor", "must exceed low_freq_factor");
    }
  } else if (type == "yarn") {
    rope.type = RopeType::kYarn;
    EXL3_ASSIGN_OR_RETURN(rope.factor, r.get_number(p, "factor", std::nullopt));
    EXL3_ASSIGN_OR_RETURN(rope.original_max_position, r.get_int(p, "original_max_position_embeddings", max_pos, 1));
    EXL3_ASSIGN_OR_RETURN(rope.beta_fast, r.get_number(p, "beta_fast", 32.0));
    EXL3_ASSIGN_OR_RETURN(rope.beta_slow, r.get_number(p, "beta_slow", 1.0));
    if (p.contains("mscale") && p["mscale"].is_number()) rope.mscale = p["mscale"].get<double>();
    if (p.contains("mscale_all_dim") && p["mscale_all_dim"].is_number()) rope.mscale_all_dim = p["mscale_all_dim"].get<double>();
    if (p.contains("attention_factor") && p["attention_factor"].is_number()) {
      rope.attention_factor = p["attention_factor"].get<double>();
    }
    if (p.contains("truncate") && p["truncate"].is_boolean()) rope.truncate = p["truncate"].get<bool>();
  } else {
    return r.error("rope type", absl::StrCat("\"", type, "\" is not supported (supported: default, linear, llama3, yarn)"));
  }
  if (!(rope.factor > 0)) return r.error("rope_parameters.factor", "must be > 0");
  return rope;
}

// A token id of config.json: an integer in [0, vocab_size).
absl::StatusOr<int32_t> parse_token_id(const Reader& r, const json& v, const std::string& field, int64_t vocab_size) {
  if (!v.is_number_integer()) return r.error(field, "must be an integer or a list of integers");
  const int64_t id = v.get<int64_t>();  // unsigned values above int64 come out negative: refused too
  if (id < 0 || id >= vocab_size) {
    return r.error(field, absl::StrCat("holds ", v.dump(), ", not a token id in [0, vocab_size ", vocab_size, ")"));
  }
  return static_cast<int32_t>(id);
}

absl::StatusOr<std::vector<int32_t>> parse_token_ids(const Reader& r, const json& v, const std::string& field,
                                                     int64_t vocab_size) {
  std::vector<int32_t> out;
  if (v.is_null()) return out;
  if (v.is_array()) {
    for (const json& e : v) {
      EXL3_ASSIGN_OR_RETURN(const int32_t id, parse_token_id(r, e, field, vocab_size));
      out.push_back(id);
    }
    return out;
  }
  EXL3_ASSIGN_OR_RETURN(const int32_t id, parse_token_id(r, v, field, vocab_size));
  out.push_back(id);
  return out;
}

}  // namespace

std::string architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
    case Architecture::kQwen3: return "Qwen3ForCausalLM";
  }
  return "?";
}

absl::StatusOr<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  Reader r(root, source);
  ModelConfig c;

  if (!root.contains("architectures") || !root["architectures"].is_array() || root["architectures"].size() != 1 ||
      !root["architectures"][0].is_string()) {
    return r.error("architectures", "must be a list with exactly one architecture name");
  }
  c.architecture_name = root["architectures"][0].get<std::string>();
  if (c.architecture_name == "LlamaForCausalLM") {
    c.architecture = Architecture::kLlama;
  } else if (c.architecture_name == "MistralForCausalLM") {
    c.architecture = Architecture::kMistral;
  } else if (c.architecture_name == "Qwen2ForCausalLM") {
    c.architecture = Architecture::kQwen2;
  } else if (c.architecture_name == "Qwen3ForCausalLM") {
    c.architecture = Architecture::kQwen3;
    c.qk_norm = true;
  } else {
    return r.error("architectures", absl::StrCat("\"", c.architecture_name,
                                                 "\" is not supported (supported: LlamaForCausalLM, "
                                                 "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)"));
  }
  // Multimodal-style configs keep the text fields under text_config.
  const json& t = root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;

  EXL3_ASSIGN_OR_RETURN(c.hidden_size, r.get_int(t, "hidden_size", std::nullopt, 1));
  EXL3_ASSIGN_OR_RETURN(c.intermediate_size, r.get_int(t, "intermediate_size", std::nullopt, 1));
  EXL3_ASSIGN_OR_RETURN(c.num_layers, r.get_int(t, "num_hidden_layers", std::nullopt, 1));
  EXL3_ASSIGN_OR_RETURN(c.num_heads, r.get_int(t, "num_attention_heads", std::nullopt, 1));
  EXL3_ASSIGN_OR_RETURN(c.num_kv_heads, r.get_int(t, "num_key_value_heads", c.num_heads, 1));
  if (c.num_heads % c.num_kv_heads != 0) {
    return r.error("num_key_value_heads", absl::StrCat("(", c.num_kv_heads, ") must divide num_attention_heads (",
                                                       c.num_heads, ")"));
  }
  if (c.hidden_size % c.num_heads != 0 && !(t.contains("head_dim") && t["head_dim"].is_number_integer())) {
    return r.error("head_dim", "is missing and hidden_size is not a multiple of num_attention_heads");
  }
  EXL3_ASSIGN_OR_RETURN(c.head_dim, r.get_int(t, "head_dim", c.hidden_size / c.num_heads, 2));
  if (c.head_dim % 2 != 0) return r.error("head_dim", "must be even");
  EXL3_ASSIGN_OR_RETURN(c.vocab_size, r.get_int(t, "vocab_size", std::nullopt, 1));
  EXL3_ASSIGN_OR_RETURN(c.max_position_embeddings, r.get_int(t, "max_position_embeddings", 8192, 1));
  EXL3_ASSIGN_OR_RETURN(c.rms_norm_eps, r.get_number(t, "rms_norm_eps", 1e-6));
  if (!(c.rms_norm_eps > 0)) return r.error("rms_norm_eps", "must be > 0");
  if (t.contains("hidden_act") && !(t["hidden_act"].is_string() && t["hidden_act"].get<std::string>() == "silu")) {
    return r.error("hidden_act", "must be \"silu\"");
  }
  if (t.contains("tie_word_embeddings")) {
    if (!t["tie_word_embeddings"].is_boolean()) return r.error("tie_word_embeddings", "must be a boolean");
    c.tie_word_embeddings = t["tie_word_embeddings"].get<bool>();
  }
  // Qwen2/Qwen3 apply their window only to some layers (max_window_layers): refused. With
  // use_sliding_window false (or absent) their sliding_window field means nothing.
  if (t.contains("use_sliding_window") && t["use_sliding_window"].is_boolean() && t["use_sliding_window"].get<bool>()) {
    return r.error("use_sliding_window", "true is not supported");
  }
  // Mistral applies its sliding_window to every layer (null or absent = off).
  if (c.architecture == Architecture::kMistral) {
    EXL3_ASSIGN_OR_RETURN(c.sliding_window, r.get_int(t, "sliding_window", 0, 1));
  }
  EXL3_ASSIGN_OR_RETURN(c.rope, parse_rope(r, t, c.max_position_embeddings));
  if (c.rotary_dim() % 2 != 0 || c.rotary_dim() < 2) return r.error("partial_rotary_factor", "gives an odd rotary dim");

  if (t.contains("bos_token_id") && !t["bos_token_id"].is_null()) {
    if (!t["bos_token_id"].is_number_integer()) return r.error("bos_token_id", "must be an integer");
    EXL3_ASSIGN_OR_RETURN(c.bos_token_id, parse_token_id(r, t["bos_token_id"], "bos_token_id", c.vocab_size));
  }
  if (t.contains("eos_token_id")) {
    EXL3_ASSIGN_OR_RETURN(c.eos_token_ids, parse_token_ids(r, t["eos_token_id"], "eos_token_id", c.vocab_size));
  }
  return c;
}

absl::StatusOr<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

}  // namespace exl3
