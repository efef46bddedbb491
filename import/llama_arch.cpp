// Llama-architecture config and tensor mapping from GGUF (see llama_arch.h).
#include "import/llama_arch.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxSize = 1 << 30;  // bound on every size field (no model comes near)
constexpr uint64_t kTensorsPerLayer = 9;  // 2 norms, q, k, v, o, gate, up, down

absl::StatusOr<int64_t> size_field(const GgufFile& f, const std::string& key, std::optional<int64_t> def) {
  if (f.find(key) == nullptr && def) return *def;
  EXL3_ASSIGN_OR_RETURN(const int64_t v, f.get_int(key));
  if (v < 1 || v > kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat(f.source(), ": metadata '", key, "' = ", v, " is not in [1, ",
                                                   kMaxSize, "]"));
  }
  return v;
}

absl::StatusOr<double> positive_number(const GgufFile& f, const std::string& key, std::optional<double> def) {
  if (f.find(key) == nullptr && def) return *def;
  EXL3_ASSIGN_OR_RETURN(const double v, f.get_number(key));
  if (!(v > 0)) return absl::InvalidArgumentError(absl::StrCat(f.source(), ": metadata '", key, "' = ", v, " must be > 0"));
  return v;
}

absl::Status bad(const GgufFile& f, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(f.source(), ": ", what));
}

}  // namespace

absl::StatusOr<LlamaFacts> read_llama_facts(const GgufFile& f) {
  EXL3_ASSIGN_OR_RETURN(const std::string arch, f.get_string("general.architecture"));
  if (arch != "llama") {
    return absl::UnimplementedError(absl::StrCat(f.source(), ": general.architecture \"", arch,
                                                 "\" is not supported by exl3-import (supported: llama)"));
  }
  LlamaFacts c;
  EXL3_ASSIGN_OR_RETURN(c.layers, size_field(f, "llama.block_count", std::nullopt));
  // Each layer has kTensorsPerLayer tensors: a larger count cannot be right (and would size the
  // tensor plan's checks from the file's word alone).
  if (static_cast<uint64_t>(c.layers) > f.tensors().size() / kTensorsPerLayer) {
    return bad(f, absl::StrCat("llama.block_count ", c.layers, " needs ", kTensorsPerLayer, " tensors per layer but the "
                               "file has ", f.tensors().size(), " tensors"));
  }
  EXL3_ASSIGN_OR_RETURN(c.hidden, size_field(f, "llama.embedding_length", std::nullopt));
  EXL3_ASSIGN_OR_RETURN(c.ffn, size_field(f, "llama.feed_forward_length", std::nullopt));
  EXL3_ASSIGN_OR_RETURN(c.heads, size_field(f, "llama.attention.head_count", std::nullopt));
  EXL3_ASSIGN_OR_RETURN(c.kv_heads, size_field(f, "llama.attention.head_count_kv", c.heads));
  EXL3_ASSIGN_OR_RETURN(c.context, size_field(f, "llama.context_length", std::nullopt));
  if (c.heads % c.kv_heads != 0) {
    return bad(f, absl::StrCat("llama.attention.head_count_kv (", c.kv_heads, ") does not divide head_count (",
                               c.heads, ")"));
  }
  if (f.find("llama.attention.key_length") == nullptr && c.hidden % c.heads != 0) {
    return bad(f, "llama.attention.key_length is missing and embedding_length is not a multiple of head_count");
  }
  EXL3_ASSIGN_OR_RETURN(c.head_dim, size_field(f, "llama.attention.key_length", c.hidden / c.heads));
  EXL3_ASSIGN_OR_RETURN(const int64_t value_dim, size_field(f, "llama.attention.value_length", c.head_dim));
  EXL3_ASSIGN_OR_RETURN(const int64_t rope_dim, size_field(f, "llama.rope.dimension_count", c.head_dim));
  if (value_dim != c.head_dim) return bad(f, absl::StrCat("value_length ", value_dim, " != key_length ", c.head_dim));
  if (rope_dim != c.head_dim) {
    return bad(f, absl::StrCat("llama.rope.dimension_count ", rope_dim, " != head dim ", c.head_dim,
                               " (partial rotary embeddings are not supported)"));
  }
  if (c.head_dim % 2 != 0) return bad(f, absl::StrCat("head dim ", c.head_dim, " is odd"));
  EXL3_ASSIGN_OR_RETURN(c.rms_eps, positive_number(f, "llama.attention.layer_norm_rms_epsilon", std::nullopt));
  EXL3_ASSIGN_OR_RETURN(c.rope_theta, positive_number(f, "llama.rope.freq_base", 10000.0));

  const GgufTensor* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) return bad(f, "tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != c.hidden) {
    return bad(f, absl::StrCat("tensor 'token_embd.weight' must have ggml dims [", c.hidden, ", vocab]"));
  }
  c.vocab = embd->dims[1];
  if (c.vocab > kMaxSize) return bad(f, absl::StrCat("vocabulary of ", c.vocab, " rows is too large"));
  c.tied = f.find_tensor("output.weight") == nullptr;
  return c;
}

absl::StatusOr<json> make_llama_config(const GgufFile& f, const LlamaFacts& c, const TokenizerFiles& tok,
                                       const std::string& torch_dtype) {
  json rope_scaling = nullptr;
  std::string type = "none";
  double factor = 1.0;
  if (f.find("llama.rope.scaling.type") != nullptr) {
    EXL3_ASSIGN_OR_RETURN(type, f.get_string("llama.rope.scaling.type"));
    if (type != "none") {
      EXL3_ASSIGN_OR_RETURN(factor, positive_number(f, "llama.rope.scaling.factor", std::nullopt));
    }
  } else if (f.find("llama.rope.scale_linear") != nullptr) {  // older files
    EXL3_ASSIGN_OR_RETURN(factor, positive_number(f, "llama.rope.scale_linear", std::nullopt));
    type = "linear";
  }
  if (type == "linear") {
    if (factor != 1.0) rope_scaling = {{"rope_type", "linear"}, {"factor", factor}};
  } else if (type == "yarn") {
    rope_scaling = {{"rope_type", "yarn"}, {"factor", factor}};
    if (f.find("llama.rope.scaling.original_context_length") != nullptr) {
      EXL3_ASSIGN_OR_RETURN(const int64_t original,
                            size_field(f, "llama.rope.scaling.original_context_length", std::nullopt));
      rope_scaling["original_max_position_embeddings"] = original;
    }
  } else if (type != "none") {
    return absl::UnimplementedError(absl::StrCat(f.source(), ": llama.rope.scaling.type \"", type,
                                                 "\" is not supported (supported: none, linear, yarn)"));
  }
  json config = {{"architectures", json::array({"LlamaForCausalLM"})},
                 {"model_type", "llama"},
                 {"hidden_size", c.hidden},
                 {"intermediate_size", c.ffn},
                 {"num_hidden_layers", c.layers},
                 {"num_attention_heads", c.heads},
                 {"num_key_value_heads", c.kv_heads},
                 {"head_dim", c.head_dim},
                 {"vocab_size", c.vocab},
                 {"max_position_embeddings", c.context},
                 {"rms_norm_eps", c.rms_eps},
                 {"rope_theta", c.rope_theta},
                 {"rope_scaling", rope_scaling},
                 {"tie_word_embeddings", c.tied},
                 {"hidden_act", "silu"},
                 {"attention_bias", false},
                 {"mlp_bias", false},
                 {"torch_dtype", torch_dtype},
                 {"bos_token_id", tok.bos_id ? json(*tok.bos_id) : json(nullptr)},
                 {"eos_token_id", tok.eos_id ? json(*tok.eos_id) : json(nullptr)}};
  if (tok.pad_id) config["pad_token_id"] = *tok.pad_id;
  return config;
}

json make_generation_config(const TokenizerFiles& tok) {
  json g = {{"_from_model_config", true}};
  if (tok.bos_id) g["bos_token_id"] = *tok.bos_id;
  json eos = json::array();
  if (tok.eos_id) eos.push_back(*tok.eos_id);
  if (tok.eot_id && tok.eot_id != tok.eos_id) eos.push_back(*tok.eot_id);
  if (eos.size() == 1) g["eos_token_id"] = eos[0];
  if (eos.size() > 1) g["eos_token_id"] = eos;
  if (tok.pad_id) g["pad_token_id"] = *tok.pad_id;
  return g;
}

absl::StatusOr<std::vector<TensorPlan>> plan_llama_tensors(const GgufFile& f, const LlamaFacts& c) {
  const int64_t q_rows = c.heads * c.head_dim, kv_rows = c.kv_heads * c.head_dim;
  // Per-layer GGUF suffix -> HF suffix, HF shape, permute heads.
  struct LayerTensor {
    const char* hf;
    std::vector<int64_t> shape;
    int64_t permute;
  };
  const std::map<std::string, LayerTensor> per_layer = {
      {"attn_norm.weight", {"input_layernorm.weight", {c.hidden}, 0}},
      {"ffn_norm.weight", {"post_attention_layernorm.weight", {c.hidden}, 0}},
      {"attn_q.weight", {"self_attn.q_proj.weight", {q_rows, c.hidden}, c.heads}},
      {"attn_k.weight", {"self_attn.k_proj.weight", {kv_rows, c.hidden}, c.kv_heads}},
      {"attn_v.weight", {"self_attn.v_proj.weight", {kv_rows, c.hidden}, 0}},
      {"attn_output.weight", {"self_attn.o_proj.weight", {c.hidden, q_rows}, 0}},
      {"ffn_gate.weight", {"mlp.gate_proj.weight", {c.ffn, c.hidden}, 0}},
      {"ffn_up.weight", {"mlp.up_proj.weight", {c.ffn, c.hidden}, 0}},
      {"ffn_down.weight", {"mlp.down_proj.weight", {c.hidden, c.ffn}, 0}},
  };
  std::vector<TensorPlan> plan;
  std::map<std::string, int> seen;
  for (const GgufTensor& t : f.tensors()) {
    TensorPlan p;
    p.source = &t;
    if (t.name == "token_embd.weight") {
      p.hf_name = "model.embed_tokens.weight";
      p.shape = {c.vocab, c.hidden};
    } else if (t.name == "output_norm.weight") {
      p.hf_name = "model.norm.weight";
      p.shape = {c.hidden};
    } else if (t.name == "output.weight") {
      p.hf_name = "lm_head.weight";
      p.shape = {c.vocab, c.hidden};
    } else if (t.name == "rope_freqs.weight") {
      return absl::UnimplementedError(absl::StrCat(
          f.source(), ": tensor 'rope_freqs.weight' (per-frequency RoPE factors, e.g. Llama 3.1's) is not "
                      "supported by exl3-import: config.json cannot express them"));
    } else {
      const std::vector<std::string> parts = absl::StrSplit(t.name, absl::MaxSplits('.', 2));
      int64_t layer = -1;
      if (parts.size() != 3 || parts[0] != "blk" || !absl::SimpleAtoi(parts[1], &layer) || layer < 0 ||
          layer >= c.layers || per_layer.count(parts[2]) == 0 || absl::StrCat(layer) != parts[1]) {
        return absl::UnimplementedError(absl::StrCat(f.source(), ": tensor '", t.name,
                                                     "' is not a tensor of the llama architecture exl3-import knows"));
      }
      const LayerTensor& lt = per_layer.at(parts[2]);
      p.hf_name = absl::StrCat("model.layers.", layer, ".", lt.hf);
      p.shape = lt.shape;
      p.permute_heads = lt.permute;
    }
    if (t.hf_shape() != p.shape) {
      std::string want, got;
      for (int64_t d : p.shape) absl::StrAppend(&want, want.empty() ? "" : ", ", d);
      for (int64_t d : t.hf_shape()) absl::StrAppend(&got, got.empty() ? "" : ", ", d);
      return bad(f, absl::StrCat("tensor '", t.name, "' has shape [", got, "], expected [", want, "] for ", p.hf_name));
    }
    ++seen[p.hf_name];
    plan.push_back(std::move(p));
  }
  // Every tensor the runtime needs must be there.
  std::vector<std::string> needed = {"model.embed_tokens.weight", "model.norm.weight"};
  for (int64_t i = 0; i < c.layers; ++i) {
    for (const auto& [gguf_suffix, lt] : per_layer) needed.push_back(absl::StrCat("model.layers.", i, ".", lt.hf));
  }
  for (const std::string& name : needed) {
    if (seen.count(name) == 0) return bad(f, absl::StrCat("no tensor for ", name));
  }
  return plan;
}

}  // namespace exl3
