// The Llama architecture of a GGUF file ("general.architecture" = "llama", which llama.cpp also
// uses for Mistral-style models): the Hugging Face config.json built from the llama.* metadata,
// and the plan that maps each GGUF tensor to its Hugging Face name, shape and Q/K un-permutation.
// Tensors the plan does not know (e.g. llama3 rope_freqs) and shapes that disagree with the
// metadata are refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "import/gguf_reader.h"
#include "import/tokenizer_writer.h"
#include "nlohmann/json.hpp"

namespace exl3 {

struct LlamaFacts {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t ffn = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;    // rows of token_embd.weight
  int64_t context = 0;
  double rms_eps = 0;
  double rope_theta = 0;
  bool tied = false;    // no output.weight: the head reuses the embedding
};

// Reads and checks the llama.* metadata and the embedding shape.
absl::StatusOr<LlamaFacts> read_llama_facts(const GgufFile& f);

// config.json (LlamaForCausalLM). `torch_dtype` is "bfloat16", "float16" or "float32".
absl::StatusOr<nlohmann::json> make_llama_config(const GgufFile& f, const LlamaFacts& facts,
                                                 const TokenizerFiles& tok, const std::string& torch_dtype);
// generation_config.json: BOS, EOS (plus the end-of-turn token when it differs), PAD.
nlohmann::json make_generation_config(const TokenizerFiles& tok);

struct TensorPlan {
  const GgufTensor* source = nullptr;
  std::string hf_name;
  std::vector<int64_t> shape;   // HF shape (checked against the metadata)
  int64_t permute_heads = 0;    // > 0: un-permute the rows with this many heads (Q: heads, K: KV heads)
};

// Every tensor of the file, in file order; an unknown name or a wrong shape is an error.
absl::StatusOr<std::vector<TensorPlan>> plan_llama_tensors(const GgufFile& f, const LlamaFacts& facts);

}  // namespace exl3
