// Llama model configs of real shapes for the planner tests: the architecture facts only (no
// weights), as a loaded config.json would give them.
#pragma once

#include <cstdint>

#include "worker/model/config.h"

namespace exl3::testing {

inline ModelConfig llama_config(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                int64_t intermediate, int64_t vocab, int64_t max_positions = 0) {
  ModelConfig c;
  c.architecture_name = "LlamaForCausalLM";
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.max_position_embeddings = max_positions;
  return c;
}

inline ModelConfig llama3_8b_config() { return llama_config(32, 4096, 32, 8, 128, 14336, 128256, 8192); }
inline ModelConfig llama31_70b_config() { return llama_config(80, 8192, 64, 8, 128, 28672, 128256, 131072); }

}  // namespace exl3::testing
