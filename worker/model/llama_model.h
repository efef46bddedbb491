// LlamaModel: the Llama-family decoder (Llama, Mistral, Qwen2 q/k/v bias, Qwen3 q/k norm) written
// once against kernels/ops.h. A model object holds one rank's shard (ModelShard): tensor-parallel
// slices (all-reduce after o_proj and down_proj, all-gather of the vocabulary-split logits) or a
// contiguous layer range (hidden states received from the previous rank and sent to the next).
// Batches of sequences run as one forward: linears over all tokens, attention per sequence through
// the paged KV cache.
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

namespace exl3 {

struct DecoderLayer {
  Tensor input_norm;  // F32 [hidden]
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

// One sequence's part of a forward batch.
struct BatchEntry {
  std::span<const int32_t> tokens;      // run at positions start_pos, start_pos + 1, ...
  int32_t start_pos = 0;
  std::span<const int32_t> page_table;  // must hold start_pos + tokens.size() positions
  LogitsMode logits = LogitsMode::kLast;
};

class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> load(const std::string& model_dir,
                                                          const LoadProgress& progress = nullptr);
  // Loads only `shard` of the model.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> load_shard(const std::string& model_dir, const ModelShard& shard,
                                                                const LoadProgress& progress = nullptr);

  const ModelConfig& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  // Bytes of the stored tensors this shard covers, and bytes this backend allocated for weights.
  uint64_t stored_bytes() const { return stored_bytes_; }
  uint64_t allocated_bytes() const { return allocated_bytes_; }
  // Mean K over the EXL3 decoder linears held (0 for unquantized models).
  double decoder_bits_per_weight() const { return decoder_bpw_; }

  KvCacheShape cache_shape(int64_t num_pages, int64_t page_size) const;

  // Runs a batch. Returns the requested logits rows in batch order (kAll: one row per token,
  // kLast: one row, kNone: none) as F32 [rows, vocab] on ranks that compute the head; other
  // ranks of a layer split return [0, vocab]. `comm` may be null for a single-rank shard.
  // Token ids must lie in [0, vocab) (the caller validates them). Collective failures abort the
  // step with the communicator's status.
  absl::StatusOr<Tensor> forward_batch(std::span<const BatchEntry> batch, KvCache& cache, Communicator* comm) const;

  // Single-sequence convenience over forward_batch for a whole-model (single-rank) shard.
  Tensor forward(std::span<const int32_t> ids, int32_t start_pos, KvCache& cache, const PageTable& pages,
                 LogitsMode mode) const;

 private:
  LlamaModel() = default;
  absl::Status load_weights(const SafetensorsCollection& tensors, const LoadProgress& progress);
  absl::Status run_layer(const DecoderLayer& layer, int64_t index, Tensor& x, std::span<const BatchEntry> batch,
                         std::span<const int32_t> positions, KvCache& cache, Communicator* comm) const;

  ModelConfig config_;
  ModelShard shard_;
  RopeTables rope_;
  Tensor embedding_;  // F32 [vocab, hidden], when the shard embeds
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;
  Linear lm_head_;    // vocabulary rows [vocab_begin, vocab_end), when the shard has the head
  uint64_t stored_bytes_ = 0;
  uint64_t allocated_bytes_ = 0;
  double decoder_bpw_ = 0.0;
  // Vocabulary width of every rank's head slice (tensor parallel), exchanged on first use.
  mutable std::vector<int64_t> vocab_widths_;
};

}  // namespace exl3
