// libFuzzer target: config.json text through parse_model_config, and the RoPE tables of every
// config it accepts (when they are of a size a real model could have).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "worker/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<exl3::ModelConfig> config = exl3::parse_model_config(text, "config.json");
  if (!config.ok()) return 0;
  const exl3::ModelConfig& c = *config;
  // What the model code relies on once a config is accepted.
  if (c.hidden_size < 1 || c.intermediate_size < 1 || c.num_layers < 1 || c.vocab_size < 1) std::abort();
  if (c.num_heads < 1 || c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0) std::abort();
  if (c.head_dim < 2 || c.head_dim % 2 != 0 || c.max_position_embeddings < 1) std::abort();
  if (!(c.rms_norm_eps > 0) || !(c.rope.theta > 0) || !(c.rope.factor > 0)) std::abort();
  const int64_t rotary = c.rotary_dim();
  if (rotary < 2 || rotary % 2 != 0 || rotary > c.head_dim) std::abort();
  if (rotary <= (1 << 14)) {
    const exl3::RopeTables rope = exl3::compute_rope(c);
    if (static_cast<int64_t>(rope.inv_freq.size()) != rotary / 2) std::abort();
  }
  return 0;
}
