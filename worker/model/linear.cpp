// Loading and validating EXL3 and dense linears (whole or a rank's slice); every error names the
// tensor and its file.
#include "worker/model/linear.h"

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace exl3 {
namespace {

constexpr int32_t kMcgMarker = static_cast<int32_t>(0xCBAC1FEDu);
constexpr int32_t kMul1Marker = static_cast<int32_t>(0x83DCD12Du);

int64_t pad128(int64_t v) { return (v + 127) / 128 * 128; }

absl::Status tensor_error(const SafetensorsCollection& t, const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(t.file_of(name), ": tensor \"", name, "\" ", what));
}

// Resolves end = -1 and checks the slice against the full logical size.
absl::StatusOr<LinearSlice> resolve(const std::string& prefix, LinearSlice s, int64_t in, int64_t out) {
  if (s.in_end < 0) s.in_end = in;
  if (s.out_end < 0) s.out_end = out;
  if (s.in_begin < 0 || s.in_begin > s.in_end || s.in_end > in || s.out_begin < 0 || s.out_begin > s.out_end ||
      s.out_end > out) {
    return absl::InvalidArgumentError(absl::StrCat("slice of \"", prefix, "\" inputs [", s.in_begin, ", ", s.in_end,
                                                   ") outputs [", s.out_begin, ", ", s.out_end, ") outside ", in, "x",
                                                   out));
  }
  return s;
}

// Copies elements [begin, end) of a 1-D tensor (any dtype).
Tensor sub_vector(const Tensor& v, int64_t begin, int64_t end) {
  Tensor out = Tensor::zeros(v.dtype(), {end - begin});
  const size_t es = dtype_size(v.dtype());
  std::memcpy(out.mutable_raw(), static_cast<const uint8_t*>(v.raw()) + begin * es, (end - begin) * es);
  return out;
}

// Trellis tiles [k0/16, k1/16) x [n0/16, n1/16) of an I16 [k/16, n/16, 16K] tensor.
Tensor sub_trellis(const Tensor& t, int64_t k0, int64_t k1, int64_t n0, int64_t n1) {
  const int64_t tn = t.dim(1), words = t.dim(2);
  if (k0 == 0 && n0 == 0 && k1 / 16 == t.dim(0) && n1 / 16 == tn) return t;
  Tensor out = Tensor::zeros(DType::kI16, {(k1 - k0) / 16, (n1 - n0) / 16, words});
  int16_t* dst = out.mutable_data<int16_t>();
  for (int64_t r = k0 / 16; r < k1 / 16; ++r) {
    const int16_t* src = t.data<int16_t>() + (r * tn + n0 / 16) * words;
    dst = std::copy_n(src, (n1 - n0) / 16 * words, dst);
  }
  return out;
}

// A padded EXL3 boundary: multiples of 128 inside, the padded size at the end.
absl::StatusOr<int64_t> exl3_bound(int64_t v, int64_t logical, const std::string& what) {
  if (v == logical) return pad128(logical);
  if (v % 128 != 0) return absl::InvalidArgumentError(absl::StrCat(what, " boundary ", v, " is not a multiple of 128"));
  return v;
}

absl::StatusOr<Tensor> load_bias(const SafetensorsCollection& t, const std::string& prefix, int64_t out,
                                 const LinearSlice& s) {
  const std::string name = prefix + ".bias";
  if (!t.has(name) || s.in_begin != 0) return Tensor();
  EXL3_ASSIGN_OR_RETURN(Tensor b, t.get(name));
  if (b.dtype() != DType::kF16 && b.dtype() != DType::kBF16 && b.dtype() != DType::kF32) {
    return tensor_error(t, name, absl::StrCat("has dtype ", dtype_name(b.dtype()), ", expected F16, BF16 or F32"));
  }
  if (b.rank() != 1 || (b.dim(0) != out && b.dim(0) != pad128(out))) {
    return tensor_error(t, name, absl::StrCat("has shape ", shape_string(b.shape()), ", expected [", out, "]"));
  }
  return sub_vector(b.to_f32(), s.out_begin, s.out_end);
}

}  // namespace

bool is_exl3_linear(const SafetensorsCollection& tensors, const std::string& prefix) {
  return tensors.has(prefix + ".trellis") && tensors.has(prefix + ".suh") && tensors.has(prefix + ".svh");
}

absl::StatusOr<Linear> Linear::prepare(const HostLinear& host, LinearInfo info, const std::string& name,
                                       Backend& backend) {
  Linear lin;
  lin.info_ = info;
  EXL3_ASSIGN_OR_RETURN(lin.weights_, backend.prepare_linear(host, name));
  lin.info_.allocated_bytes = lin.weights_.bytes;
  return lin;
}

absl::StatusOr<Linear> Linear::load(const SafetensorsCollection& t, const std::string& prefix, int64_t in_features,
                                    int64_t out_features, LinearSlice slice, Backend& backend) {
  EXL3_ASSIGN_OR_RETURN(const LinearSlice s, resolve(prefix, slice, in_features, out_features));
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
    EXL3_ASSIGN_OR_RETURN(Tensor bias, load_bias(t, prefix, out_features, s));
    const DType bias_dtype = bias.defined() ? t.find(prefix + ".bias")->dtype : DType::kF32;
    return load_dense_with_bias(t, prefix + ".weight", in_features, out_features, s, std::move(bias), bias_dtype,
                                backend);
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
  EXL3_ASSIGN_OR_RETURN(const int64_t k0, exl3_bound(s.in_begin, in_features, prefix + " input"));
  EXL3_ASSIGN_OR_RETURN(const int64_t k1, exl3_bound(s.in_end, in_features, prefix + " input"));
  EXL3_ASSIGN_OR_RETURN(const int64_t n0, exl3_bound(s.out_begin, out_features, prefix + " output"));
  EXL3_ASSIGN_OR_RETURN(const int64_t n1, exl3_bound(s.out_end, out_features, prefix + " output"));

  EXL3_ASSIGN_OR_RETURN(Tensor trellis, t.get(trellis_name));
  EXL3_ASSIGN_OR_RETURN(Tensor suh, t.get_checked(prefix + ".suh", DType::kF16, {k}));
  EXL3_ASSIGN_OR_RETURN(Tensor svh, t.get_checked(prefix + ".svh", DType::kF16, {n}));
  Exl3Weight w;
  w.k = k1 - k0;
  w.n = n1 - n0;
  w.bits = static_cast<int>(ti->shape[2] / 16);
  w.trellis = sub_trellis(trellis, k0, k1, n0, n1);
  w.suh = sub_vector(suh, k0, k1);
  w.svh = sub_vector(svh, n0, n1);

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

  LinearInfo info;
  info.exl3 = true;
  info.bits = w.bits;
  info.codebook = w.codebook;
  info.in_features = s.in_end - s.in_begin;
  info.out_features = s.out_end - s.out_begin;
  info.stored_bytes = w.trellis.nbytes() + w.suh.nbytes() + w.svh.nbytes();
  HostLinear host;
  host.in_features = info.in_features;
  host.out_features = info.out_features;
  host.is_exl3 = true;
  host.exl3 = std::move(w);
  EXL3_ASSIGN_OR_RETURN(host.bias, load_bias(t, prefix, out_features, s));
  if (host.bias.defined()) info.stored_bytes += host.bias.numel() * 2;
  return prepare(host, info, prefix, backend);
}

absl::StatusOr<Linear> Linear::load_dense(const SafetensorsCollection& t, const std::string& name, int64_t in_features,
                                          int64_t out_features, LinearSlice slice, Backend& backend) {
  EXL3_ASSIGN_OR_RETURN(const LinearSlice s, resolve(name, slice, in_features, out_features));
  return load_dense_with_bias(t, name, in_features, out_features, s, Tensor(), DType::kF32, backend);
}

absl::StatusOr<Linear> Linear::load_dense_with_bias(const SafetensorsCollection& t, const std::string& name,
                                                    int64_t in_features, int64_t out_features, const LinearSlice& s,
                                                    Tensor bias, DType bias_stored_dtype, Backend& backend) {
  EXL3_ASSIGN_OR_RETURN(Tensor w, t.get(name));
  if (w.dtype() != DType::kF16 && w.dtype() != DType::kBF16 && w.dtype() != DType::kF32) {
    return tensor_error(t, name, absl::StrCat("has dtype ", dtype_name(w.dtype()), ", expected F16, BF16 or F32"));
  }
  // HF layout (out, in); EXL3 models with head_bits 16 may pad out to 128.
  if (w.rank() != 2 || w.dim(1) != in_features || (w.dim(0) != out_features && w.dim(0) != pad128(out_features))) {
    return tensor_error(t, name, absl::StrCat("has shape ", shape_string(w.shape()), ", expected [", out_features, ", ",
                                              in_features, "]"));
  }
  const int64_t rows = s.in_end - s.in_begin, cols = s.out_end - s.out_begin;
  LinearInfo info;
  info.bits = w.dtype() == DType::kF32 ? 32 : 16;
  info.in_features = rows;
  info.out_features = cols;
  info.stored_bytes = static_cast<uint64_t>(rows * cols) * dtype_size(w.dtype());
  HostLinear host;
  host.in_features = rows;
  host.out_features = cols;
  // Only the held (out, in) block is copied out of the mapped file, in its stored dtype.
  host.dense = Tensor::zeros(w.dtype(), {cols, rows});
  const size_t es = dtype_size(w.dtype());
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<uint8_t*>(host.dense.mutable_raw());
  for (int64_t o = 0; o < cols; ++o) {
    std::memcpy(dst + o * rows * es, src + ((s.out_begin + o) * in_features + s.in_begin) * es, rows * es);
  }
  host.bias = std::move(bias);
  if (host.bias.defined()) info.stored_bytes += host.bias.numel() * dtype_size(bias_stored_dtype);
  return prepare(host, info, name, backend);
}

}  // namespace exl3
