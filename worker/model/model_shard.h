// ModelShard: which part of the model one rank holds (the worker-side mirror of the planner's
// ShardPlan). Tensor parallel: every layer, a KV-head range and an MLP column range per layer, a
// vocabulary range of the head. Layer split: a contiguous layer range, whole layers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/config.h"

namespace exl3 {

enum class ShardMode { kTensorParallel, kLayers };

struct LayerSlice {
  int64_t kv_head_begin = 0, kv_head_end = 0;  // KV heads [begin, end); query heads follow
  int64_t mlp_begin = 0, mlp_end = 0;          // intermediate columns [begin, end)
};

struct ModelShard {
  ShardMode mode = ShardMode::kTensorParallel;
  int rank = 0;
  int world_size = 1;
  int64_t first_layer = 0, end_layer = 0;  // layers held, [first, end)
  std::vector<LayerSlice> layers;          // one per held layer, in order
  int64_t vocab_begin = 0, vocab_end = 0;  // head rows held
  bool has_embedding = true;
  bool has_head = true;

  // The whole model on one rank.
  static ModelShard full(const ModelConfig& config);
  const LayerSlice& slice(int64_t layer) const { return layers.at(layer - first_layer); }
  int64_t local_kv_heads(int64_t layer) const { return slice(layer).kv_head_end - slice(layer).kv_head_begin; }
  // Checks ranges against the model: inside bounds, EXL3-compatible 128 alignment.
  absl::Status validate(const ModelConfig& config) const;
};

}  // namespace exl3
