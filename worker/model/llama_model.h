// LlamaModel: the Llama-family decoder (Llama, Mistral, Qwen2 q/k/v bias, Qwen3 q/k norm) written
// once against a Backend (kernels/backend.h): the same code runs on the CPU and CUDA backends. A
// model object holds one rank's shard (ModelShard): tensor-parallel slices (all-reduce after o_proj
// and down_proj, all-gather of the vocabulary-split logits) or a contiguous layer range (hidden
// states received from the previous rank and sent to the next). Batches of sequences run as one
// forward: linears over all tokens, attention per token through each sequence's KV pages. Weights,
// and (after reserve()) a workspace sized for the largest step, are allocated at load; a step only
// takes views of the workspace. Decode-only steps can replay one captured step graph per batch bucket
// (StepLimits::step_graphs, on backends with supports_step_graphs()): see forward_batch_device.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/kv_cache.h"
#include "worker/model/config.h"
#include "worker/model/linear.h"
#include "worker/model/model_shard.h"
#include "worker/model/step_graph_cache.h"
#include "worker/model/workspace.h"

namespace exl3 {

struct DecoderLayer {
  Tensor input_norm;  // F32 [hidden], on the backend's device
  Tensor post_norm;   // F32 [hidden]
  Tensor q_norm;      // F32 [head_dim] (Qwen3 only)
  Tensor k_norm;
  int64_t heads = 0;     // query heads held
  int64_t kv_heads = 0;  // KV heads held
  Linear q, k, v, o;
  Linear gate, up, down;
};

// Called after each loaded component: (done, total).
using LoadProgress = std::function<void(int64_t done, int64_t total)>;

enum class LogitsMode { kNone, kLast, kAll };

// The largest step a model is prepared for (its workspace and the backend's scratch are sized from
// these once, at load).
struct StepLimits {
  int64_t max_step_tokens = 2048;  // tokens in one forward (prefill chunks + decodes)
  int64_t max_seqs = 256;          // sequences in one forward
  int64_t max_pages_per_seq = 64;  // KV pages of one sequence
  int64_t max_logit_rows = 256;    // rows through the head in one forward
  // Decode-only steps (one token and its logits per sequence) replay a step graph captured once
  // per (sequences, page bucket) when the backend and the communicator allow it.
  bool step_graphs = false;
};

// One sequence's part of a forward batch.
struct BatchEntry {
  std::span<const int32_t> tokens;      // run at positions start_pos, start_pos + 1, ...
  int32_t start_pos = 0;
  std::span<const int32_t> page_table;  // must hold start_pos + tokens.size() positions
  LogitsMode logits = LogitsMode::kLast;
};

class LlamaModel {
 public:
  // On a CPU backend of its own (tools, tests).
  static absl::StatusOr<std::unique_ptr<LlamaModel>> load(const std::string& model_dir,
                                                          const LoadProgress& progress = nullptr);
  // Loads only `shard` of the model, on a CPU backend of its own.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> load_shard(const std::string& model_dir, const ModelShard& shard,
                                                                const LoadProgress& progress = nullptr);
  // Loads `shard` onto `backend` (shared with the KV cache and the communicator's stream).
  static absl::StatusOr<std::unique_ptr<LlamaModel>> load_shard(const std::string& model_dir, const ModelShard& shard,
                                                                std::shared_ptr<Backend> backend,
                                                                const LoadProgress& progress = nullptr);

  const ModelConfig& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  Backend& backend() const { return *backend_; }
  // Bytes of the stored tensors this shard covers, and bytes this backend allocated for weights.
  uint64_t stored_bytes() const { return stored_bytes_; }
  uint64_t allocated_bytes() const { return allocated_bytes_; }
  // Bytes of the forward workspace (after reserve()).
  uint64_t workspace_bytes() const { return workspace_.capacity(); }
  // Mean K over the EXL3 decoder linears held (0 for unquantized models).
  double decoder_bits_per_weight() const { return decoder_bpw_; }
  // Held layer i (0 = first_layer) and the head (when the shard has it), e.g. for benchmarks.
  const DecoderLayer& layer(int64_t i) const { return layers_.at(static_cast<size_t>(i)); }
  const Linear& head() const { return lm_head_; }

  // This shard's KV cache: its KV heads per layer, the widths `bits` (default full precision) and
  // the model's sliding window.
  KvCacheShape cache_shape(int64_t num_pages, int64_t page_size, const KvCacheBits& bits = {}) const;

  // Allocates the forward workspace and the backend's scratch for steps within `limits` (once;
  // a later call with larger limits reallocates, so call it before serving, never inside a step).
  absl::Status reserve(const StepLimits& limits) { return reserve_limits(limits); }
  const StepLimits& limits() const { return limits_; }
  // Workspace bytes a step within `limits` needs on this shard and backend.
  uint64_t workspace_bytes_for(const StepLimits& limits) const;

  // Runs a batch. Returns the requested logits rows in batch order (kAll: one row per token,
  // kLast: one row, kNone: none) as host F32 [rows, vocab] on ranks that compute the head; other
  // ranks of a layer split return [0, vocab]. `comm` may be null for a single-rank shard.
  // Token ids must lie in [0, vocab) (the caller validates them). A batch beyond the reserved
  // limits is RESOURCE_EXHAUSTED; collective failures abort the step with the communicator's status.
  absl::StatusOr<Tensor> forward_batch(std::span<const BatchEntry> batch, KvCache& cache, Communicator* comm) const;
  // forward_batch without the download: the same rows as F32 [rows, vocab] on the backend's
  // device, a view of the workspace valid until the next forward (tensor parallel: the gathered
  // slices re-packed on the device). Queued work is not waited for. Ranks of a layer split without
  // the head return an empty host [0, vocab].
  // Step graphs: with limits().step_graphs on a backend that supports them, a batch of one token
  // and LogitsMode::kLast per sequence on a whole-model or tensor-parallel shard (comm null, a world
  // of one, or one whose supports_graph_capture(); a tensor-parallel head once it knows every
  // rank's vocabulary width) takes its buffers for the bucket (sequences, page columns rounded up
  // to a power of two, capped at max_pages_per_seq), uploads its metadata, then replays the
  // bucket's graph (captured on first use). A failed capture prints one line to stderr, switches
  // graphs off for this model and runs the step eagerly. Attention then plans for the bucket's
  // last position, so its split count (and fp32 summation order) can differ from an eager step.
  absl::StatusOr<Tensor> forward_batch_device(std::span<const BatchEntry> batch, KvCache& cache,
                                              Communicator* comm) const;

  // Step graphs captured (one per distinct bucket, cache and communicator seen) and replayed so far,
  // and whether graphs are in use (limits().step_graphs, not switched off by a failed capture).
  int64_t step_graph_count() const { return graph_captures_; }
  int64_t graph_replays() const { return graph_replays_; }
  bool step_graphs_enabled() const { return limits_.step_graphs && !graphs_failed_; }

  ~LlamaModel();

  // Single-sequence convenience over forward_batch for a whole-model (single-rank) shard; grows the
  // reserved limits when the call needs more (tools and tests only).
  Tensor forward(std::span<const int32_t> ids, int32_t start_pos, KvCache& cache, const PageTable& pages,
                 LogitsMode mode) const;

 private:
  LlamaModel() = default;
  struct StepDims;
  struct StepBuffers;
  absl::Status load_weights(const SafetensorsCollection& tensors, const LoadProgress& progress);
  absl::StatusOr<StepBuffers> take_buffers(const StepDims& d, Workspace& w) const;
  // The workspace is the model's per-step state: (re)sized here, outside any step.
  absl::Status reserve_limits(const StepLimits& limits) const;
  // `next`: the layer after it on this shard (null for the last), whose attention norm the MLP's
  // linear_add may hand off; `handoff` carries what each linear_add hands to the norm after it.
  absl::Status run_layer(const DecoderLayer& layer, const DecoderLayer* next, int64_t index, StepBuffers& b,
                         const StepMeta& meta, KvCache& cache, Communicator* comm, NormHandoff& handoff) const;
  absl::StatusOr<Tensor> run_head(StepBuffers& b, const StepMeta& meta, Communicator* comm) const;
  // The logits view run_head returns: the re-packed gathered rows (tensor parallel) or the head's.
  Tensor head_output(const StepBuffers& b, Communicator* comm) const;
  // The step's device work after its metadata is uploaded: the embedding (or the hidden state from
  // the previous rank), every held layer, then the head (or the send to the next rank). Returns the
  // logits view on a head shard, an undefined tensor otherwise. Eager steps and graph captures
  // both run this.
  absl::StatusOr<Tensor> issue_step(StepBuffers& b, KvCache& cache, Communicator* comm) const;
  // Whether this batch may replay a step graph (see forward_batch_device).
  bool graph_eligible(std::span<const BatchEntry> batch, Communicator* comm) const;
  // Replays the graph of `key`, capturing it first when there is none. A failure says why; the
  // caller then runs the step eagerly.
  absl::Status replay_graph(const StepGraphKey& key, StepBuffers& b, KvCache& cache, Communicator* comm) const;

  ModelConfig config_;
  ModelShard shard_;
  std::shared_ptr<Backend> backend_;
  RopeTables rope_;
  Tensor inv_freq_;   // F32 [rotary_dim / 2] on the device
  Tensor embedding_;  // [vocab, hidden] on the device, when the shard embeds
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;
  Linear lm_head_;    // vocabulary rows [vocab_begin, vocab_end), when the shard has the head
  uint64_t stored_bytes_ = 0;
  uint64_t allocated_bytes_ = 0;
  double decoder_bpw_ = 0.0;
  mutable StepLimits limits_;
  mutable Workspace workspace_;
  // Vocabulary width of every rank's head slice (tensor parallel), exchanged on first use.
  mutable std::vector<int64_t> vocab_widths_;
  // Step graphs (dropped whenever the workspace is reallocated) and their counts.
  mutable StepGraphCache graphs_;
  mutable int64_t graph_captures_ = 0;
  mutable int64_t graph_replays_ = 0;
  mutable bool graphs_failed_ = false;  // a capture or replay failed: eager from then on
};

}  // namespace exl3
