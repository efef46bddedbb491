// ModelFootprint: a Llama-family model described as the pieces the shard planner hands out, with
// the bytes a worker of a given backend allocates for each piece. Per layer an attention component
// (unit: a group of KV heads), an MLP component (unit: 128 intermediate columns); the lm_head
// (unit: 128 vocabulary rows); replicated parts (embedding, norms); a per-step workspace estimate.
// Splitting rules follow exl3-format.md §11: every slice boundary of an EXL3 tensor falls on a
// multiple of 128 features (a Hadamard block), or on the end of the dimension.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/loader/safetensors.h"
#include "worker/model/config.h"

namespace exl3 {

// What a worker allocates for its weights.
//   kCpu:  the CPU worker dequantizes every linear at load and keeps it as fp32 [in, out] (logical,
//          unpadded sizes), biases, norms and the embedding as fp32, KV cache as fp32.
//   kCuda: the stored bytes of the held slices (EXL3 tensors are used as stored; KV cache fp16).
//          Needs the safetensors headers.
enum class Backend { kCpu, kCuda };

absl::StatusOr<Backend> parse_backend(const std::string& name);  // "cpu" or "cuda"
std::string backend_name(Backend backend);

enum class ComponentKind { kAttention, kMlp, kHead };
std::string component_name(ComponentKind kind);  // "attention", "MLP", "lm_head"

// One projection inside a component and how it is cut: a column split cuts the outputs
// (q/k/v, gate/up, lm_head), a row split the inputs (o_proj, down_proj).
struct LinearPart {
  std::string prefix;       // tensor prefix, e.g. "model.layers.3.self_attn.q_proj"
  int64_t in_features = 0;  // logical (unpadded) sizes
  int64_t out_features = 0;
  bool split_columns = true;
  int64_t features_per_unit = 0;  // features of the split dimension in one unit
  bool has_bias = false;

  // Storage, from the safetensors headers (used by kCuda).
  bool exl3 = false;
  int64_t trellis_words = 0;    // last trellis dimension (16 * K)
  uint64_t marker_bytes = 0;    // codebook marker scalar (mcg/mul1), 0 when absent
  size_t dense_dtype_size = 2;  // element size of a dense (non-EXL3) weight
  size_t bias_dtype_size = 2;

  int64_t split_extent() const { return split_columns ? out_features : in_features; }
  // Bytes allocated for split features [begin, end) (logical indices), excluding the bytes that
  // every holder pays once (see holder_bytes) and the row-split bias (see first_holder_bytes).
  uint64_t slice_bytes(Backend backend, int64_t begin, int64_t end) const;
  // Bytes every rank holding a non-empty slice pays once: kCuda keeps the unsplit scale vector
  // (suh of a column split, svh of a row split) and the codebook marker.
  uint64_t holder_bytes(Backend backend) const;
  // A row-split bias is added once, by the rank whose slice starts at input 0.
  uint64_t first_holder_bytes(Backend backend) const;
  // K of the EXL3 tensor, 0 when dense.
  int bits() const { return exl3 ? static_cast<int>(trellis_words / 16) : 0; }
};

// One splittable component: `units` units of `unit_size` features each over `extent` features
// (the last unit is partial when extent % unit_size != 0). Unit u covers split features
// [u * features_per_unit, min((u + 1) * features_per_unit, split_extent)) of every linear.
struct ComponentFootprint {
  ComponentKind kind = ComponentKind::kAttention;
  int64_t layer = -1;  // -1 for the head
  Backend backend = Backend::kCpu;
  int64_t units = 0;
  int64_t unit_size = 0;  // KV heads (attention), intermediate columns (MLP), vocab rows (head)
  int64_t extent = 0;     // num_kv_heads, intermediate_size or vocab_size
  std::vector<LinearPart> linears;
  // Bytes a rank holding at least one unit pays once besides its linears: the q/k norms of Qwen3
  // (the worker loads them only where it holds attention heads).
  uint64_t holder_bytes = 0;
  // Attention: K and V cache bytes of one KV head for one token (0 for other components).
  uint64_t cache_bytes_per_head_token = 0;

  // First feature (KV head, column, row) of unit `u`, clamped to `extent` (so u = units gives extent).
  int64_t feature(int64_t u) const;
  // Weight bytes of units [begin, end) held by one rank (0 when empty).
  uint64_t weight_bytes(int64_t begin, int64_t end) const;
  // KV cache bytes of units [begin, end) for `tokens` cached positions (attention only).
  uint64_t cache_bytes(int64_t begin, int64_t end, int64_t tokens) const;
  // Weight bytes of one full unit (the first), for tables.
  uint64_t unit_weight_bytes() const { return weight_bytes(0, units > 0 ? 1 : 0); }
};

struct LayerFootprint {
  ComponentFootprint attention;
  ComponentFootprint mlp;
  uint64_t norm_bytes = 0;  // input and post-attention norms: replicated in tp mode
};

// Activation workspace of one forward step, a deliberately simple upper bound:
//   bytes = step_tokens * per_token + step_tokens * context * per_token_context + context * per_context
// kCpu (fp32, 4 bytes per element):
//   per_token = 4 * (4 * hidden      residual, normed input, o_proj and down_proj outputs
//                    + 2 * q_dim     queries, attention output
//                    + 2 * kv_dim    keys, values
//                    + 3 * inter     gate, up, silu(gate) * up
//                    + vocab)        logits (all-gathered to full width in tp mode)
//   per_token_context = 4           one attention score row per token (kernels/cpu/attention.cpp)
//   per_context = 8 * head_dim      the gathered K and V rows of one head
// kCuda: same activations in fp16 (2 bytes) except fp32 logits, no score matrix (fused attention).
// Each rank reserves the whole-model figure whatever its share (the residual stream and logits
// are full width on every rank anyway); the figure is per step, not per sequence.
struct WorkspaceFootprint {
  uint64_t per_token = 0;
  uint64_t per_token_context = 0;
  uint64_t per_context = 0;
  uint64_t bytes(int64_t step_tokens, int64_t context) const;
};

struct ModelFootprint {
  ModelConfig config;
  Backend backend = Backend::kCpu;
  std::vector<LayerFootprint> layers;
  ComponentFootprint head;
  uint64_t embedding_bytes = 0;
  uint64_t final_norm_bytes = 0;
  WorkspaceFootprint workspace;
  // Mean K over the EXL3 decoder linears (weighted by padded k*n) and the head's K; 0 when the
  // headers were not given or the tensors are dense.
  double decoder_bits = 0.0;
  int head_bits = 0;
  bool head_from_embedding = false;  // tied embeddings without a stored lm_head
  // Choices the footprint made that a user should see (printed under the plan table).
  std::vector<std::string> notes;

  // Bytes held in full by every rank in tp mode: embedding, every norm, the final norm.
  uint64_t replicated_bytes() const;
  // Weights of one whole layer (both components and its norms) and its KV cache for `tokens`.
  uint64_t layer_weight_bytes(int64_t layer) const;
  uint64_t layer_cache_bytes(int64_t layer, int64_t tokens) const;
  // Weights of the head plus the final norm (what the head-holding rank of a layer split adds).
  uint64_t head_weight_bytes() const;
  // The whole model held by one rank: every weight, and the KV cache of every layer.
  uint64_t total_weight_bytes() const;
  uint64_t total_cache_bytes(int64_t tokens) const;
};

// Builds the footprint. `tensors` (may be null for kCpu) supplies EXL3 bits, stored bytes and the
// presence of biases and of lm_head; without it Qwen2 is assumed to carry q/k/v biases and every
// other architecture none, and lm_head is assumed present unless tie_word_embeddings.
// Errors: kCuda without tensors; a missing tensor (named); MLP slices (not supported by the worker).
absl::StatusOr<ModelFootprint> build_model_footprint(const ModelConfig& config, Backend backend,
                                                     const SafetensorsCollection* tensors = nullptr);

// KV heads per attention unit: the smallest w with w * head_dim % 128 == 0 (1 for head_dim 128, 2
// for 64), or num_kv_heads (one unit: attention not split) when w does not divide num_kv_heads.
int64_t kv_heads_per_unit(const ModelConfig& config);

}  // namespace exl3
