// The tensor plan of a synthetic EXL3 model: every module (embedding, each decoder layer, final
// norm, head) with its tensors' names, dtypes, shapes and how their contents are generated, the
// per-linear bit widths and codebooks. Pure: nothing is written here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/model_shapes.h"
#include "bench/safetensors_stream_writer.h"

namespace exl3 {

struct ModelPlanOptions {
  std::string shape;           // a name from model_shape_names()
  int64_t layers = 0;          // 0 = the shape's layer count
  double bpw = 4.0;            // decoder mean K, in [1, 8]
  int head_bits = 6;           // 1..8 (EXL3 head) or 16 (fp16 lm_head.weight)
  std::string codebook = "mul1";  // mul1 | mcg | 3inst | mixed (rotates over the three per linear)
  uint64_t seed = 0;
};

struct PlannedLinear {
  std::string prefix;        // e.g. "model.layers.0.self_attn.q_proj"
  int64_t in_features = 0;   // logical sizes; EXL3 tensors are padded to multiples of 128
  int64_t out_features = 0;
  int bits = 16;             // K, or 16 for a dense fp16 weight
  std::string codebook;      // "mul1", "mcg", "3inst"; empty when dense
  bool decoder = true;       // false for lm_head
};

// One module: stored whole in one shard.
struct PlannedModule {
  std::string key;  // e.g. "model.layers.3" (a whole decoder layer) or "lm_head"
  std::vector<StreamTensor> tensors;
  uint64_t bytes() const;
};

struct ModelPlan {
  ModelShape shape;
  int64_t num_layers = 0;
  std::vector<PlannedModule> modules;   // model order: embedding, layers, norm, head
  std::vector<PlannedLinear> linears;   // decoder linears in model order, then the head
  double decoder_bits = 0.0;            // achieved mean K over decoder linears, weighted by weights
  uint64_t total_bytes() const;
};

// Validates the options (errors name the flag) and builds the plan.
absl::StatusOr<ModelPlan> plan_model(const ModelPlanOptions& options);

// Codebook marker values as stored (int32 of the uint32 multipliers; exl3-format.md §2.1).
inline constexpr int32_t kMcgMarkerValue = static_cast<int32_t>(0xCBAC1FEDu);
inline constexpr int32_t kMul1MarkerValue = static_cast<int32_t>(0x83DCD12Du);

}  // namespace exl3
