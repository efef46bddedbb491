// LlamaModel: the Llama-family decoder (Llama, Mistral, Qwen2 q/k/v bias, Qwen3 q/k norm) written
// once against kernels/ops.h. Prefill and incremental decode go through the paged KV cache.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/kv_cache.h"
#include "worker/model/config.h"
#include "worker/model/linear.h"

namespace exl3 {

struct DecoderLayer {
  Tensor input_norm;  // F32 [hidden]
  Tensor post_norm;   // F32 [hidden]
  Tensor q_norm;      // F32 [head_dim] (Qwen3 only)
  Tensor k_norm;
  Linear q, k, v, o;
  Linear gate, up, down;
};

// Called after each loaded component: (done, total).
using LoadProgress = std::function<void(int64_t done, int64_t total)>;

enum class LogitsMode { kAll, kLast };

class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> load(const std::string& model_dir,
                                                          const LoadProgress& progress = nullptr);

  const ModelConfig& config() const { return config_; }
  // Bytes of the stored tensors this model loaded (from the safetensors headers).
  uint64_t stored_bytes() const { return stored_bytes_; }
  // Mean K over the EXL3 decoder linears (0 for unquantized models) and the head's K.
  double decoder_bits_per_weight() const { return decoder_bpw_; }

  KvCacheShape cache_shape(int64_t num_pages, int64_t page_size) const;

  // Runs `ids` of one sequence at positions start_pos, start_pos+1, ... through the model, writing
  // their K/V into `pages` (which must already hold start_pos + ids.size() positions). Returns
  // logits F32 [ids.size(), vocab] (kAll) or [1, vocab] for the last token (kLast).
  // Token ids must lie in [0, vocab); the caller validates them.
  Tensor forward(std::span<const int32_t> ids, int32_t start_pos, KvCache& cache, const PageTable& pages,
                 LogitsMode mode) const;

 private:
  LlamaModel() = default;
  absl::Status load_weights(const SafetensorsCollection& tensors, const LoadProgress& progress);

  ModelConfig config_;
  RopeTables rope_;
  Tensor embedding_;  // F32 [vocab, hidden]
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;
  Linear lm_head_;
  uint64_t stored_bytes_ = 0;
  double decoder_bpw_ = 0.0;
};

}  // namespace exl3
