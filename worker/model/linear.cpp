// Loading and validating EXL3 and dense linears; every error names the tensor and its file.
#include "worker/model/linear.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace exl3 {
namespace {

constexpr int32_t kMcgMarker = static_cast<int32_t>(0xCBAC1FEDu);
constexpr int32_t kMul1Marker = static_cast<int32_t>(0x83DCD12Du);

int64_t pad128(int64_t v) { return (v + 127) / 128 * 128; }

absl::Status tensor_error(const SafetensorsCollection& t, const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(t.file_of(name), ": tensor \"", name, "\" ", what));
}

// Copies the top-left [rows, cols] block of a row-major [?, full_cols] fp32 matrix.
Tensor crop(const Tensor& m, int64_t rows, int64_t cols) {
  if (m.dim(0) == rows && m.dim(1) == cols) return m;
  Tensor out = Tensor::zeros(DType::kF32, {rows, cols});
  const int64_t full_cols = m.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(m.data<float>() + r * full_cols, cols, out.mutable_data<float>() + r * cols);
  }
  return out;
}

absl::StatusOr<Tensor> load_bias(const SafetensorsCollection& t, const std::string& prefix, int64_t out, int64_t padded) {
  const std::string name = prefix + ".bias";
  if (!t.has(name)) return Tensor();
  EXL3_ASSIGN_OR_RETURN(Tensor b, t.get(name));
  if (b.dtype() != DType::kF16 && b.dtype() != DType::kBF16 && b.dtype() != DType::kF32) {
    return tensor_error(t, name, absl::StrCat("has dtype ", dtype_name(b.dtype()), ", expected F16, BF16 or F32"));
  }
  if (b.rank() != 1 || (b.dim(0) != out && b.dim(0) != padded)) {
    return tensor_error(t, name, absl::StrCat("has shape ", shape_string(b.shape()), ", expected [", out, "]"));
  }
  Tensor f = b.to_f32();
  return crop(f.reshape({1, b.dim(0)}), 1, out).reshape({out});
}

}  // namespace

bool is_exl3_linear(const SafetensorsCollection& tensors, const std::string& prefix) {
  return tensors.has(prefix + ".trellis") && tensors.has(prefix + ".suh") && tensors.has(prefix + ".svh");
}

absl::StatusOr<Linear> Linear::load(const SafetensorsCollection& t, const std::string& prefix, int64_t in_features,
                                    int64_t out_features) {
  if (!is_exl3_linear(t, prefix)) {
    if (t.has(prefix + ".trellis") || t.has(prefix + ".su") || t.has(prefix + ".sv")) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.file_of(prefix + ".trellis"), ": EXL3 linear \"", prefix,
          "\" is incomplete or uses the legacy su/sv sign layout (needs trellis, suh and svh)"));
    }
    if (!t.has(prefix + ".weight")) {
      return absl::NotFoundError(absl::StrCat("missing tensor \"", prefix, ".weight\" (and no EXL3 \"", prefix,
                                              ".trellis\")"));
    }
    EXL3_ASSIGN_OR_RETURN(Linear lin, load_dense(t, prefix + ".weight", in_features, out_features));
    EXL3_ASSIGN_OR_RETURN(lin.bias_, load_bias(t, prefix, out_features, out_features));
    if (lin.bias_.defined()) lin.info_.stored_bytes += t.find(prefix + ".bias")->end - t.find(prefix + ".bias")->begin;
    return lin;
  }

  const std::string trellis_name = prefix + ".trellis";
  const TensorInfo* ti = t.find(trellis_name);
  if (ti->dtype != DType::kI16 || ti->shape.size() != 3) {
    return tensor_error(t, trellis_name, absl::StrCat("is ", dtype_name(ti->dtype), " ", shape_string(ti->shape),
                                                      ", expected I16 [k/16, n/16, 16*K]"));
  }
  const int64_t k = ti->shape[0] * 16, n = ti->shape[1] * 16;
  if (ti->shape[2] % 16 != 0 || ti->shape[2] < 16 || ti->shape[2] > 128) {
    return tensor_error(t, trellis_name, absl::StrCat("last dimension ", ti->shape[2], " is not 16*K with K in 1..8"));
  }
  if (k != pad128(in_features) || n != pad128(out_features)) {
    return tensor_error(t, trellis_name, absl::StrCat("encodes a ", k, "x", n, " weight, but the model needs ",
                                                      in_features, "x", out_features, " (padded: ", pad128(in_features),
                                                      "x", pad128(out_features), ")"));
  }
  Exl3Weight w;
  w.k = k;
  w.n = n;
  w.bits = static_cast<int>(ti->shape[2] / 16);
  EXL3_ASSIGN_OR_RETURN(w.trellis, t.get(trellis_name));
  EXL3_ASSIGN_OR_RETURN(w.suh, t.get_checked(prefix + ".suh", DType::kF16, {k}));
  EXL3_ASSIGN_OR_RETURN(w.svh, t.get_checked(prefix + ".svh", DType::kF16, {n}));

  const bool mcg = t.has(prefix + ".mcg"), mul1 = t.has(prefix + ".mul1");
  if (mcg && mul1) return tensor_error(t, prefix + ".mcg", "and .mul1 are both present (at most one codebook marker)");
  w.codebook = mcg ? Codebook::kMcg : mul1 ? Codebook::kMul1 : Codebook::k3Inst;
  if (mcg || mul1) {
    const std::string marker = prefix + (mcg ? ".mcg" : ".mul1");
    EXL3_ASSIGN_OR_RETURN(Tensor m, t.get_checked(marker, DType::kI32, {}));
    const int32_t expected = mcg ? kMcgMarker : kMul1Marker;
    if (m.data<int32_t>()[0] != expected) {
      std::fprintf(stderr, "warning: %s holds %d, not the locked multiplier %d; decoding with the locked one\n",
                   marker.c_str(), m.data<int32_t>()[0], expected);
    }
  }

  Linear lin;
  lin.info_.exl3 = true;
  lin.info_.bits = w.bits;
  lin.info_.codebook = w.codebook;
  lin.info_.in_features = in_features;
  lin.info_.out_features = out_features;
  for (const char* suffix : {".trellis", ".suh", ".svh", ".mcg", ".mul1", ".bias"}) {
    if (const TensorInfo* info = t.find(prefix + suffix)) lin.info_.stored_bytes += info->end - info->begin;
  }
  lin.weight_ = crop(exl3_dequantize_ref(w), in_features, out_features);
  EXL3_ASSIGN_OR_RETURN(lin.bias_, load_bias(t, prefix, out_features, n));
  return lin;
}

absl::StatusOr<Linear> Linear::load_dense(const SafetensorsCollection& t, const std::string& name, int64_t in_features,
                                          int64_t out_features) {
  EXL3_ASSIGN_OR_RETURN(Tensor w, t.get(name));
  if (w.dtype() != DType::kF16 && w.dtype() != DType::kBF16 && w.dtype() != DType::kF32) {
    return tensor_error(t, name, absl::StrCat("has dtype ", dtype_name(w.dtype()), ", expected F16, BF16 or F32"));
  }
  // HF layout (out, in); EXL3 models with head_bits 16 may pad out to 128.
  if (w.rank() != 2 || w.dim(1) != in_features || (w.dim(0) != out_features && w.dim(0) != pad128(out_features))) {
    return tensor_error(t, name, absl::StrCat("has shape ", shape_string(w.shape()), ", expected [", out_features, ", ",
                                              in_features, "]"));
  }
  const Tensor f = w.to_f32();
  Linear lin;
  lin.info_.bits = w.dtype() == DType::kF32 ? 32 : 16;
  lin.info_.in_features = in_features;
  lin.info_.out_features = out_features;
  lin.info_.stored_bytes = w.nbytes();
  lin.weight_ = Tensor::zeros(DType::kF32, {in_features, out_features});
  float* dst = lin.weight_.mutable_data<float>();
  const float* src = f.data<float>();
  for (int64_t o = 0; o < out_features; ++o) {
    for (int64_t i = 0; i < in_features; ++i) dst[i * out_features + o] = src[o * in_features + i];
  }
  return lin;
}

Tensor Linear::forward(const Tensor& x) const {
  EXL3_CHECK(x.rank() == 2 && x.dim(1) == info_.in_features, "linear input ", shape_string(x.shape()), ", expected [m, ",
             info_.in_features, "]");
  Tensor y = matmul(x, weight_);
  if (bias_.defined()) {
    float* out = y.mutable_data<float>();
    const float* b = bias_.data<float>();
    for (int64_t r = 0; r < y.dim(0); ++r) {
      for (int64_t c = 0; c < info_.out_features; ++c) out[r * info_.out_features + c] += b[c];
    }
  }
  return y;
}

}  // namespace exl3
