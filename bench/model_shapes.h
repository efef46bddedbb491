// Named model shapes for synthetic EXL3 models (exl3-bench make-model): the architecture facts of
// real Hugging Face checkpoints (Llama-3.1-8B/70B, Qwen2.5-32B) plus a tiny shape for tests, and
// the config.json each one would have.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace exl3 {

struct ModelShape {
  std::string name;               // --shape value, e.g. "llama-3.1-8b"
  std::string architecture;       // config.json "architectures"[0]
  std::string model_type;         // config.json "model_type"
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool rope_llama3 = false;        // llama3 scaling with the four fields below
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position = 0;
  bool qkv_bias = false;           // Qwen2: q/k/v_proj carry a bias
  int32_t bos_token_id = 0;
  int32_t eos_token_id = 0;
  std::string bos_token;           // special token texts for the generated tokenizer
  std::string eos_token;
};

// The shape called `name`, or nullptr.
const ModelShape* find_model_shape(const std::string& name);
// All shape names, in a fixed order (for --help and errors).
std::vector<std::string> model_shape_names();

// The Hugging Face config.json of `shape` with `num_layers` layers (no quantization_config).
nlohmann::json hf_config_json(const ModelShape& shape, int64_t num_layers);

}  // namespace exl3
