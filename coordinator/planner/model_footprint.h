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
#include "worker/kv_cache_bits.h"
#include "worker/loader/safetensors.h"
#include "worker/model/config.h"

namespace exl3 {

// What a worker allocates for its weights.
//   kCpu:  the CPU worker dequantizes every linear at load and keeps it as fp32 [in, out] (logical,
//          unpadded sizes), biases, norms and the embedding as fp32, KV cache as fp32.
//   kCuda: what the CUDA backend (kernels/cuda/cuda_backend.h) allocates on the device: EXL3
//          slices as stored (trellis, suh and svh of the slice; no codebook marker), biases F32,
//          dense linears F16 [out, in], norms F32, KV cache F16. The embedding table stays in
//          pinned host memory in its stored dtype (Backend::prepare_host_table: kernels read the
//          step's rows over PCIe), so it costs no device memory; a head tied to the embedding is
//          still a dense F16 device weight. Needs the safetensors headers.
enum class BackendKind { kCpu, kCuda };

absl::StatusOr<BackendKind> parse_backend(const std::string& name);  // "cpu" or "cuda"
std::string backend_name(BackendKind backend);

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
  uint64_t marker_bytes = 0;    // codebook marker scalar (mcg/mul1) on disk, 0 when absent (not loaded)
  size_t dense_dtype_size = 2;  // element size of a dense (non-EXL3) weight on disk
  size_t bias_dtype_size = 2;   // on disk; the CUDA worker keeps biases as F32

  int64_t split_extent() const { return split_columns ? out_features : in_features; }
  // Bytes allocated for split features [begin, end) (logical indices), excluding the bytes that
  // every holder pays once (see holder_bytes) and the row-split bias (see first_holder_bytes).
  uint64_t slice_bytes(BackendKind backend, int64_t begin, int64_t end) const;
  // Bytes every rank holding a non-empty slice pays once: kCuda keeps the unsplit scale vector
  // (suh of a column split, svh of a row split).
  uint64_t holder_bytes(BackendKind backend) const;
  // A row-split bias is added once, by the rank whose slice starts at input 0.
  uint64_t first_holder_bytes(BackendKind backend) const;
  // K of the EXL3 tensor, 0 when dense.
  int bits() const { return exl3 ? static_cast<int>(trellis_words / 16) : 0; }
};

// One splittable component: `units` units of `unit_size` features each over `extent` features
// (the last unit is partial when extent % unit_size != 0). Unit u covers split features
// [u * features_per_unit, min((u + 1) * features_per_unit, split_extent)) of every linear.
struct ComponentFootprint {
  ComponentKind kind = ComponentKind::kAttention;
  int64_t layer = -1;  // -1 for the head
  BackendKind backend = BackendKind::kCpu;
  int64_t units = 0;
  int64_t unit_size = 0;  // KV heads (attention), intermediate columns (MLP), vocab rows (head)
  int64_t extent = 0;     // num_kv_heads, intermediate_size or vocab_size
  std::vector<LinearPart> linears;
  // Bytes a rank holding at least one unit pays once besides its linears: the q/k norms of Qwen3
  // (the worker loads them only where it holds attention heads).
  uint64_t holder_bytes = 0;
  // Attention: the KV cache of one token is head_dim elements per KV head for K and for V, each
  // stored at its width (cache_bits: full-precision elements of cache_element_bytes, or quantized
  // words and scales, see worker/kv_cache_bits.h). 0 / unused for other components.
  int64_t cache_head_dim = 0;
  uint64_t cache_element_bytes = 0;
  KvCacheBits cache_bits{};

  // First feature (KV head, column, row) of unit `u`, clamped to `extent` (so u = units gives extent).
  int64_t feature(int64_t u) const;
  // Weight bytes of units [begin, end) held by one rank (0 when empty).
  uint64_t weight_bytes(int64_t begin, int64_t end) const;
  // KV cache bytes (K and V) of one token for `kv_heads` KV heads (attention only).
  uint64_t cache_token_bytes(int64_t kv_heads) const;
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
// Each rank reserves the whole-model figure whatever its share (the residual stream and logits
// are full width on every rank anyway); the figure is per step, not per sequence.
// kCuda workers are priced exactly instead, by cuda_rank_reserve below (these fields stay 0).
struct WorkspaceFootprint {
  uint64_t per_token = 0;
  uint64_t per_token_context = 0;
  uint64_t per_context = 0;
  uint64_t bytes(int64_t step_tokens, int64_t context) const;
};

struct ModelFootprint {
  ModelConfig config;
  BackendKind backend = BackendKind::kCpu;
  std::vector<LayerFootprint> layers;
  ComponentFootprint head;
  // The embedding table on the rank that embeds: embedding_bytes counts against the rank's cap
  // (kCpu: fp32 in RAM; kCuda: 0), embedding_host_bytes is held in pinned host memory outside the
  // cap (kCuda: the stored table; kCpu: 0).
  uint64_t embedding_bytes = 0;
  uint64_t embedding_host_bytes = 0;
  uint64_t final_norm_bytes = 0;
  WorkspaceFootprint workspace;
  // Mean K over the EXL3 decoder linears (weighted by padded k*n) and the head's K; 0 when the
  // headers were not given or the tensors are dense.
  double decoder_bits = 0.0;
  int head_bits = 0;
  bool head_from_embedding = false;  // tied embeddings without a stored lm_head
  // Choices the footprint made that a user should see (printed under the plan table).
  std::vector<std::string> notes;
  // Widths the KV cache is priced at (every attention component's cache_bits); see set_cache_bits.
  KvCacheBits cache_bits{};

  // Prices the KV cache at `bits` (--cache-bits) from now on. INVALID_ARGUMENT for widths other
  // than 2..8 / 16, or a quantized width when a rank's KV heads x head_dim could miss a multiple of
  // 32 (the smallest attention unit's features are checked: every rank holds whole units).
  absl::Status set_cache_bits(const KvCacheBits& bits);

  // Bytes held in full by every rank in tp mode: embedding (embedding_bytes), every norm, the final norm.
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

// ---- What a CUDA worker allocates besides weights and KV cache ----------------------------------

// Fixed device memory of one CUDA worker process that the model does not determine (one table, so
// calibration edits one place). context and nccl are outside the backend's allocator (the driver
// and NCCL allocate them), so the allocator's cap is the rank's cap minus those two;
// cublas_workspace and bookkeeping go through the allocator.
// Calibration (2026-11-30, H200s, device used minus our allocator's bytes after loading): a lone
// CUDA worker 597 MiB (context); two NVLink ranks with NCCL 2.28 defaults 1465 MiB per rank, so
// NCCL takes 865 MiB per rank.
struct CudaOverheads {
  uint64_t context_bytes;           // CUDA context, kernel images, cuBLAS handle: 600 MiB (measured 597)
  uint64_t nccl_bytes;              // NCCL communicator buffers, per rank when world > 1: 900 MiB (measured 865)
  uint64_t cublas_workspace_bytes;  // CudaBackendOptions::cublas_workspace_bytes (32 MiB default)
  uint64_t bookkeeping_bytes;       // the backend's F16 range-check result (2 x u64)
};
inline constexpr CudaOverheads kCudaOverheads{uint64_t{600} << 20, uint64_t{900} << 20, uint64_t{32} << 20, 16};

// The largest step a worker is loaded for (mirrors StepLimits in worker/model/llama_model.h; the
// coordinator sends the same numbers in LoadShard).
struct StepShape {
  int64_t tokens = 2048;        // max_step_tokens
  int64_t seqs = 256;           // max_seqs
  int64_t pages_per_seq = 64;   // max_pages_per_seq (the engine uses num_pages)
  int64_t logit_rows = 256;     // max_logit_rows
  int64_t page_size = 256;      // KV page size: the sampler's history holds pages_per_seq pages
};

// The widest parts one rank holds, which size its workspace and scratch.
struct RankShape {
  int64_t kv_heads = 0;     // most KV heads held in any layer (query heads follow)
  int64_t mlp_columns = 0;  // most intermediate columns held in any layer
  int64_t vocab_rows = 0;   // lm_head rows held (0 without the head)
  bool has_head = false;
  bool gathers_logits = false;  // tensor parallel over more than one rank, with the head
  int world_size = 1;
};

// Bytes of the forward workspace arena LlamaModel::workspace_bytes_for reserves (every buffer of
// take_buffers in worker/model/llama_model.cpp, each rounded up to 256 bytes; at least 256), with
// activations of `activation_bytes` (4 on the CPU backend, 2 on CUDA).
uint64_t forward_workspace_bytes(const ModelConfig& config, const RankShape& rank, const StepShape& step,
                                 uint64_t activation_bytes);

// Widest padded linear a rank runs: max(hidden, held q heads x head_dim, held MLP columns, held
// vocabulary rows), rounded up to 128 (what LlamaModel passes to Backend::reserve_scratch).
int64_t widest_padded_features(const ModelConfig& config, const RankShape& rank);

// CUDA backend scratch for `rows` rows through linears of `features` padded features: linear
// scratch F16 + F32 [rows, features] and the attention split-K scratch (mirrors reserve_scratch in
// kernels/cuda/cuda_backend.cpp; the attention's share is kernels/attention_scratch.h's).
uint64_t cuda_scratch_bytes(int64_t rows, int64_t features);

// Everything besides weights and KV cache that one CUDA rank holds, by part.
struct CudaRankReserve {
  uint64_t workspace = 0;   // forward workspace arena
  uint64_t scratch = 0;     // linear + attention scratch
  uint64_t engine = 0;      // RoPE inv_freq (F32) + the engine's sampled-token exchange (F32 [seqs])
  uint64_t sampler = 0;     // the backend's sampler: row params, history, scratch; sampled ids
  uint64_t allocator_fixed = 0;  // cuBLAS workspace + bookkeeping (through the allocator)
  uint64_t context = 0;     // CUDA context (outside the allocator)
  uint64_t nccl = 0;        // NCCL buffers (outside the allocator; 0 for a world of one)
  uint64_t oneshot = 0;     // the one-shot all-reduce's receive buffer and call state (cudaMalloc'd
                            // outside the allocator; 0 unless --all-reduce oneshot over several ranks)
  uint64_t total() const {
    return workspace + scratch + engine + sampler + allocator_fixed + context + nccl + oneshot;
  }
  uint64_t outside_allocator() const { return context + nccl + oneshot; }
};
CudaRankReserve cuda_rank_reserve(const ModelConfig& config, const RankShape& rank, const StepShape& step);
// Device memory of the one-shot all-reduce of one rank for parts up to `max_bytes` (0: none):
// its receive buffer (oneshot::buffer_bytes) and call state, each a cudaMalloc rounded up to the
// driver's 2 MiB granularity.
uint64_t cuda_oneshot_all_reduce_bytes(int world_size, int64_t max_bytes);
// What the CUDA backend's reserve_sampling(rows, vocab, history) plus the engine's sampled ids and
// logprob rows take (mirrors kernels/cuda/sample.cu's scratch layout and
// sizeof(DeviceSampleRow) == 88).
uint64_t cuda_sampler_bytes(int64_t rows, int64_t vocab, int64_t history_tokens);

// The RankShape that bounds every rank of a plan: all KV heads, all MLP columns, the whole
// vocabulary, gathering logits when tensor parallel over several ranks. The planner charges this
// bound on every CUDA rank that holds anything.
RankShape widest_rank_shape(const ModelConfig& config, bool tensor_parallel, int world_size);

// Builds the footprint. `tensors` (may be null for kCpu) supplies EXL3 bits, stored bytes and the
// presence of biases and of lm_head; without it Qwen2 is assumed to carry q/k/v biases and every
// other architecture none, and lm_head is assumed present unless tie_word_embeddings.
// Errors: kCuda without tensors; a missing tensor (named); MLP slices (not supported by the worker).
absl::StatusOr<ModelFootprint> build_model_footprint(const ModelConfig& config, BackendKind backend,
                                                     const SafetensorsCollection* tensors = nullptr);

// KV heads per attention unit: the smallest w with w * head_dim % 128 == 0 (1 for head_dim 128, 2
// for 64), or num_kv_heads (one unit: attention not split) when w does not divide num_kv_heads.
int64_t kv_heads_per_unit(const ModelConfig& config);

}  // namespace exl3
