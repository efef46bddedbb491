// ModelConfig: the architecture facts of a Llama-family model, parsed and validated from a Hugging
// Face config.json (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace exl3 {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };

enum class RopeType { kDefault, kLinear, kLlama3, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                      // linear, llama3, yarn
  double low_freq_factor = 1.0;             // llama3
  double high_freq_factor = 4.0;            // llama3
  int64_t original_max_position = 0;       // llama3, yarn (0: use max_position_embeddings)
  double beta_fast = 32.0;                  // yarn
  double beta_slow = 1.0;                   // yarn
  std::optional<double> mscale;             // yarn
  std::optional<double> mscale_all_dim;     // yarn
  std::optional<double> attention_factor;   // yarn: explicit cos/sin scaling
  bool truncate = true;                     // yarn: integer correction range
  double partial_rotary_factor = 1.0;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 8192;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qk_norm = false;  // Qwen3: per-head RMSNorm of q and k before RoPE
  // Mistral's `sliding_window` (every layer): a token at position p attends to positions
  // p - sliding_window + 1 .. p only; 0 = full causal attention (null or absent in config.json).
  int64_t sliding_window = 0;
  RopeConfig rope;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  int64_t rotary_dim() const { return static_cast<int64_t>(head_dim * rope.partial_rotary_factor); }
};

// Parses config.json text; `source` names the file in errors. Unknown architectures and RoPE
// types are refused by name; missing or out-of-range fields are named.
absl::StatusOr<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);
absl::StatusOr<ModelConfig> load_model_config(const std::string& model_dir);

// Rotary inverse frequencies (length rotary_dim / 2) and the cos/sin scaling, following the
// semantics of Hugging Face transformers' RoPE initialisers for each scaling type.
struct RopeTables {
  std::vector<float> inv_freq;
  float attention_scaling = 1.0f;
};
RopeTables compute_rope(const ModelConfig& config);

std::string architecture_name(Architecture a);

}  // namespace exl3
