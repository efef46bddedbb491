// Linear: one projection y = x · W (+ b) of a model, loaded from EXL3 tensors (§2.1 of
// exl3-format.md: trellis + suh + svh [+ mcg|mul1] [+ bias]) or from a dense HF weight (out, in).
// The CPU backend dequantizes EXL3 weights once at load and multiplies with BLAS.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/ops.h"
#include "worker/loader/safetensors.h"

namespace exl3 {

struct LinearInfo {
  bool exl3 = false;
  int bits = 16;                       // K for EXL3, else 16 (fp16/bf16) or 32
  Codebook codebook = Codebook::k3Inst;
  int64_t in_features = 0;             // logical (unpadded) sizes
  int64_t out_features = 0;
  uint64_t stored_bytes = 0;           // bytes of the tensors on disk
};

class Linear {
 public:
  Linear() = default;

  // Loads `prefix` (e.g. "model.layers.0.self_attn.q_proj"). EXL3 dims must be the logical dims
  // padded to 128. A bias is loaded when `prefix.bias` exists.
  static absl::StatusOr<Linear> load(const SafetensorsCollection& tensors, const std::string& prefix,
                                     int64_t in_features, int64_t out_features);
  // A dense linear from an HF-layout (out, in) matrix tensor, e.g. tied embeddings used as the head.
  static absl::StatusOr<Linear> load_dense(const SafetensorsCollection& tensors, const std::string& weight_name,
                                           int64_t in_features, int64_t out_features);

  // x [m, in_features] -> [m, out_features].
  Tensor forward(const Tensor& x) const;
  const LinearInfo& info() const { return info_; }
  const Tensor& weight() const { return weight_; }  // F32 [in_features, out_features]

 private:
  LinearInfo info_;
  Tensor weight_;
  Tensor bias_;  // F32 [out_features], or undefined
};

// True when `prefix` is stored as EXL3 (trellis, suh and svh present).
bool is_exl3_linear(const SafetensorsCollection& tensors, const std::string& prefix);

}  // namespace exl3
