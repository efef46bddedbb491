// Linear: one projection y = x · W (+ b) of a model, loaded from EXL3 tensors (§2.1 of
// exl3-format.md: trellis + suh + svh [+ mcg|mul1] [+ bias]) or from a dense HF weight (out, in),
// validated on the host (only the held slice is read) and handed to a Backend, which keeps it in
// its own resident form (CPU: dequantized fp32; CUDA: the trellis).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/loader/safetensors.h"

namespace exl3 {

// Part of a linear held by one rank, in logical feature indices: inputs [in_begin, in_end) (a
// row split) and outputs [out_begin, out_end) (a column split). For EXL3 every boundary must be a
// multiple of 128 or the end of the dimension. end = -1 means the end of the dimension.
struct LinearSlice {
  int64_t in_begin = 0, in_end = -1;
  int64_t out_begin = 0, out_end = -1;
};

struct LinearInfo {
  bool exl3 = false;
  int bits = 16;                       // K for EXL3, else 16 (fp16/bf16) or 32
  Codebook codebook = Codebook::k3Inst;
  int64_t in_features = 0;             // logical (unpadded) sizes of the held slice
  int64_t out_features = 0;
  uint64_t stored_bytes = 0;           // bytes of the held slice's tensors on disk
  uint64_t allocated_bytes = 0;        // bytes this backend allocated for it
};

class Linear {
 public:
  Linear() = default;

  // Loads `slice` of `prefix` (e.g. "model.layers.0.self_attn.q_proj") whose full logical size
  // is in_features x out_features. EXL3 dims must be the logical dims padded to 128. A bias
  // (`prefix.bias`) is loaded for the slice's outputs, on the slice that starts at input 0 only
  // (row-split partial sums add it once).
  static absl::StatusOr<Linear> load(const SafetensorsCollection& tensors, const std::string& prefix,
                                     int64_t in_features, int64_t out_features, LinearSlice slice, Backend& backend);
  // A dense linear from an HF-layout (out, in) matrix tensor, e.g. tied embeddings used as the head.
  static absl::StatusOr<Linear> load_dense(const SafetensorsCollection& tensors, const std::string& weight_name,
                                           int64_t in_features, int64_t out_features, LinearSlice slice,
                                           Backend& backend);

  const LinearInfo& info() const { return info_; }
  const LinearWeights& weights() const { return weights_; }

 private:
  static absl::StatusOr<Linear> load_dense_with_bias(const SafetensorsCollection& tensors, const std::string& name,
                                                     int64_t in_features, int64_t out_features, const LinearSlice& s,
                                                     Tensor bias, DType bias_stored_dtype, Backend& backend);
  static absl::StatusOr<Linear> prepare(const HostLinear& host, LinearInfo info, const std::string& name,
                                        Backend& backend);

  LinearInfo info_;
  LinearWeights weights_;
};

// True when `prefix` is stored as EXL3 (trellis, suh and svh present).
bool is_exl3_linear(const SafetensorsCollection& tensors, const std::string& prefix);

}  // namespace exl3
