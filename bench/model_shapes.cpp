// The named shapes, with the values of the public Hugging Face config.json files.
#include "bench/model_shapes.h"

namespace exl3 {
namespace {

ModelShape llama31(const std::string& name, int64_t hidden, int64_t layers, int64_t heads, int64_t mlp) {
  ModelShape s;
  s.name = name;
  s.architecture = "LlamaForCausalLM";
  s.model_type = "llama";
  s.hidden_size = hidden;
  s.num_layers = layers;
  s.num_heads = heads;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.intermediate_size = mlp;
  s.vocab_size = 128256;
  s.max_position_embeddings = 131072;
  s.rms_norm_eps = 1e-5;
  s.rope_theta = 500000.0;
  s.rope_llama3 = true;
  s.rope_factor = 8.0;
  s.rope_low_freq_factor = 1.0;
  s.rope_high_freq_factor = 4.0;
  s.rope_original_max_position = 8192;
  s.bos_token_id = 128000;
  s.eos_token_id = 128001;
  s.bos_token = "<|begin_of_text|>";
  s.eos_token = "<|end_of_text|>";
  return s;
}

ModelShape qwen25_32b() {
  ModelShape s;
  s.name = "qwen2.5-32b";
  s.architecture = "Qwen2ForCausalLM";
  s.model_type = "qwen2";
  s.hidden_size = 5120;
  s.num_layers = 64;
  s.num_heads = 40;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.intermediate_size = 27648;
  s.vocab_size = 152064;
  s.max_position_embeddings = 131072;
  s.rms_norm_eps = 1e-6;
  s.rope_theta = 1000000.0;
  s.qkv_bias = true;
  s.bos_token_id = 151643;
  s.eos_token_id = 151643;
  s.bos_token = "<|endoftext|>";
  s.eos_token = "<|endoftext|>";
  return s;
}

// Small enough for unit tests (a 2-layer model is about 1 MB at 4 bpw); BOS/EOS ids inside the
// byte range so the generated tokenizer has to place byte tokens around them.
ModelShape tiny() {
  ModelShape s;
  s.name = "tiny";
  s.architecture = "LlamaForCausalLM";
  s.model_type = "llama";
  s.hidden_size = 256;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.intermediate_size = 512;
  s.vocab_size = 1024;
  s.max_position_embeddings = 2048;
  s.rms_norm_eps = 1e-5;
  s.rope_theta = 10000.0;
  s.bos_token_id = 1;
  s.eos_token_id = 2;
  s.bos_token = "<s>";
  s.eos_token = "</s>";
  return s;
}

const std::vector<ModelShape>& all_shapes() {
  static const std::vector<ModelShape> shapes = {
      llama31("llama-3.1-8b", 4096, 32, 32, 14336),
      llama31("llama-3.1-70b", 8192, 80, 64, 28672),
      qwen25_32b(),
      tiny(),
  };
  return shapes;
}

}  // namespace

const ModelShape* find_model_shape(const std::string& name) {
  for (const ModelShape& s : all_shapes()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> model_shape_names() {
  std::vector<std::string> names;
  for (const ModelShape& s : all_shapes()) names.push_back(s.name);
  return names;
}

nlohmann::json hf_config_json(const ModelShape& s, int64_t num_layers) {
  using json = nlohmann::json;
  json c = json::object();
  c["architectures"] = json::array({s.architecture});
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = s.bos_token_id;
  c["eos_token_id"] = s.eos_token_id;
  c["head_dim"] = s.head_dim;
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hidden_size;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = s.intermediate_size;
  c["max_position_embeddings"] = s.max_position_embeddings;
  c["model_type"] = s.model_type;
  c["num_attention_heads"] = s.num_heads;
  c["num_hidden_layers"] = num_layers;
  c["num_key_value_heads"] = s.num_kv_heads;
  c["rms_norm_eps"] = s.rms_norm_eps;
  c["rope_theta"] = s.rope_theta;
  if (s.rope_llama3) {
    c["rope_scaling"] = {{"factor", s.rope_factor},
                         {"low_freq_factor", s.rope_low_freq_factor},
                         {"high_freq_factor", s.rope_high_freq_factor},
                         {"original_max_position_embeddings", s.rope_original_max_position},
                         {"rope_type", "llama3"}};
  }
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = "bfloat16";
  c["use_cache"] = true;
  c["vocab_size"] = s.vocab_size;
  if (s.model_type == "llama") {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
  } else if (s.model_type == "qwen2") {
    c["max_window_layers"] = num_layers;
    c["sliding_window"] = s.max_position_embeddings;
    c["use_sliding_window"] = false;
  }
  return c;
}

}  // namespace exl3
