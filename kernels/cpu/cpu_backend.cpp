// The CPU backend: host memory with an optional cap, fp32 activations and KV cache, EXL3 weights
// dequantized to fp32 at load and multiplied through BLAS (with int8 activations on, the EXL3
// linears they may apply to keep the decoded inner weight instead: exl3_inner_linear.cpp). Every op
// checks its contract and calls the loops in kernels/cpu/.
#include <atomic>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp16.h"
#include "kernels/paged_kv_check.h"

namespace exl3 {
namespace {

std::string mib(uint64_t bytes) { return absl::StrFormat("%.2f MiB", bytes / 1048576.0); }

void check_host(const Tensor& t, const char* what) {
  EXL3_CHECK(t.defined() && t.on_host(), what, " must be a defined host tensor");
}

void check_f32(const Tensor& t, const char* what) {
  check_host(t, what);
  EXL3_CHECK(t.dtype() == DType::kF32, what, " must be F32, got ", dtype_name(t.dtype()));
}

// F32 pages at 16 bits (paged_kv_check.h).
void check_cache(const PagedKv& c) { check_paged_kv(c, Device::kCpu, DType::kF32); }

CpuPagedBatch paged_batch(const StepMeta& m) {
  return CpuPagedBatch{static_cast<const int32_t*>(m.positions.raw()), static_cast<const int32_t*>(m.token_seq.raw()),
                       static_cast<const int32_t*>(m.page_table.raw()), m.num_tokens, m.num_seqs, m.max_pages};
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : cap_(options.cap_bytes),
        int8_activations_(options.int8_activations),
        live_(std::make_shared<std::atomic<uint64_t>>(0)) {}

  Device device() const override { return Device::kCpu; }
  std::string description() const override { return "cpu (fp32, OpenBLAS)"; }
  DType activation_dtype() const override { return DType::kF32; }
  DType kv_dtype() const override { return DType::kF32; }

  absl::StatusOr<Tensor> allocate(DType dtype, const Shape& shape, const std::string& what) override {
    uint64_t bytes = dtype_size(dtype);
    for (int64_t d : shape) {
      EXL3_CHECK(d >= 0, "allocate ", what, ": negative dimension in ", shape_string(shape));
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
        return absl::ResourceExhaustedError(
            absl::StrCat("cpu backend: allocating ", what, " ", shape_string(shape), ": the size overflows 64 bits"));
      }
    }
    const uint64_t live = live_->load();
    if (cap_ > 0 && live + bytes > cap_) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu backend: allocating ", what, " (", mib(bytes),
                                                       ") would exceed the cap of ", mib(cap_), " (", mib(live),
                                                       " in use): short by ", mib(live + bytes - cap_)));
    }
    Tensor host;
    try {
      host = Tensor::zeros(dtype, shape);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu backend: allocating ", what, " (", mib(bytes), ", ",
                                                       mib(live), " in use): out of host memory"));
    }
    live_->fetch_add(bytes);
    // The counter drops when the last view of the buffer goes away.
    auto counter = live_;
    std::shared_ptr<const void> owner(new Tensor(host), [counter, bytes](const void* p) {
      counter->fetch_sub(bytes);
      delete static_cast<const Tensor*>(p);
    });
    return Tensor::wrap(Device::kCpu, dtype, shape, host.mutable_raw(), std::move(owner));
  }
  uint64_t allocated_bytes() const override { return live_->load(); }
  uint64_t cap_bytes() const override { return cap_; }

  void upload(const Tensor& host, Tensor& dst) override {
    check_host(host, "upload source");
    EXL3_CHECK(host.dtype() == dst.dtype() && host.numel() == dst.numel(), "upload ", dtype_name(host.dtype()),
               shape_string(host.shape()), " into ", dtype_name(dst.dtype()), shape_string(dst.shape()));
    if (host.nbytes() > 0) std::memcpy(dst.mutable_raw(), host.raw(), host.nbytes());
  }
  void download(const Tensor& src, Tensor& host) override { upload(src, host); }
  absl::Status synchronize() override { return absl::OkStatus(); }

  absl::StatusOr<LinearWeights> prepare_linear(const HostLinear& h, const std::string& name) override {
    LinearWeights w;
    w.in_features = h.in_features;
    w.out_features = h.out_features;
    if (h.is_exl3 && h.in_features > 0 && h.out_features > 0 &&
        use_int8_activations(int8_activations_, h.exl3.bits, h.exl3.codebook, 1)) {
      EXL3_RETURN_IF_ERROR(prepare_inner(h.exl3, name, w));
    } else {
      EXL3_RETURN_IF_ERROR(prepare_dense(h, name, w));
    }
    if (h.bias.defined()) {
      EXL3_ASSIGN_OR_RETURN(w.bias, prepare_tensor(h.bias, DType::kF32, name));
      w.bytes += w.bias.nbytes();
    }
    return w;
  }

  // The folded W = diag(suh) · BD(H) · Wq · BD(H) · diag(svh) as F32 [in, out].
  absl::Status prepare_dense(const HostLinear& h, const std::string& name, LinearWeights& w) {
    EXL3_ASSIGN_OR_RETURN(w.dense, allocate(DType::kF32, {h.in_features, h.out_features}, name));
    float* dst = static_cast<float*>(w.dense.mutable_raw());
    if (h.in_features > 0 && h.out_features > 0) {
      if (h.is_exl3) {
        const Tensor full = exl3_dequantize_cpu(h.exl3);
        for (int64_t i = 0; i < h.in_features; ++i) {
          std::memcpy(dst + i * h.out_features, full.data<float>() + i * h.exl3.n, h.out_features * sizeof(float));
        }
      } else {
        // HF [out, in] block -> [in, out] fp32.
        const Tensor block = h.dense.to_f32();
        const float* src = block.data<float>();
        for (int64_t o = 0; o < h.out_features; ++o) {
          for (int64_t i = 0; i < h.in_features; ++i) dst[i * h.out_features + o] = src[o * h.in_features + i];
        }
      }
    }
    w.bytes = w.dense.nbytes();
    return absl::OkStatus();
  }

  // An EXL3 linear int8 activations may apply to: Wq decoded to F32 [k, n] and suh, svh kept
  // instead of the folded W (about the same bytes, so the planner's price holds). linear() runs
  // every call through them (exl3_inner_linear_cpu), with int8 activations where the rule says.
  absl::Status prepare_inner(const Exl3Weight& e, const std::string& name, LinearWeights& w) {
    w.is_exl3 = true;
    w.exl3.k = e.k;
    w.exl3.n = e.n;
    w.exl3.bits = e.bits;
    w.exl3.codebook = e.codebook;
    EXL3_ASSIGN_OR_RETURN(w.inner, allocate(DType::kF32, {e.k, e.n}, name + " (inner weight Wq)"));
    upload(exl3_decode_inner_cpu(e), w.inner);
    EXL3_ASSIGN_OR_RETURN(w.exl3.suh, prepare_tensor(e.suh, DType::kF16, name + " suh"));
    EXL3_ASSIGN_OR_RETURN(w.exl3.svh, prepare_tensor(e.svh, DType::kF16, name + " svh"));
    w.bytes = w.inner.nbytes() + w.exl3.suh.nbytes() + w.exl3.svh.nbytes();
    return absl::OkStatus();
  }

  absl::StatusOr<Tensor> prepare_tensor(const Tensor& host, DType dtype, const std::string& name) override {
    check_host(host, "prepare_tensor source");
    EXL3_ASSIGN_OR_RETURN(Tensor t, allocate(dtype, host.shape(), name));
    if (dtype == DType::kF32) {
      upload(host.to_f32(), t);
    } else if (dtype == host.dtype()) {
      upload(host, t);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(name, ": cpu backend converts to F32 only, asked for ",
                                                     dtype_name(dtype), " from ", dtype_name(host.dtype())));
    }
    return t;
  }

  absl::StatusOr<Tensor> prepare_host_table(const Tensor& host, DType dtype, const std::string& name) override {
    return prepare_tensor(host, dtype, name);
  }
  uint64_t host_table_bytes() const override { return 0; }

  absl::Status reserve_pool(uint64_t) override { return absl::OkStatus(); }
  absl::Status reserve_scratch(int64_t, int64_t) override { return absl::OkStatus(); }
  absl::Status reserve_sampling(int64_t, int64_t, int64_t) override { return absl::OkStatus(); }

  void zero(Tensor& t) override {
    check_host(t, "zero");
    if (t.nbytes() > 0) std::memset(t.mutable_raw(), 0, t.nbytes());
  }

  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    check_host(table, "embedding table");
    check_f32(out, "embedding out");
    EXL3_CHECK(table.rank() == 2 && ids.dtype() == DType::kI32 && out.rank() == 2 && out.dim(0) == ids.numel() &&
                   out.dim(1) == table.dim(1),
               "embedding: table ", shape_string(table.shape()), " ids ", shape_string(ids.shape()), " out ",
               shape_string(out.shape()));
    embedding_cpu(table.raw(), table.dtype(), static_cast<const int32_t*>(ids.raw()),
                  static_cast<float*>(out.mutable_raw()), ids.numel(), table.dim(1));
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    check_f32(x, "rms_norm x");
    check_f32(weight, "rms_norm weight");
    check_f32(out, "rms_norm out");
    const int64_t dim = weight.numel();
    EXL3_CHECK(dim > 0 && x.numel() % dim == 0 && out.numel() == x.numel(), "rms_norm: x ", shape_string(x.shape()),
               " weight ", shape_string(weight.shape()), " out ", shape_string(out.shape()));
    rms_norm_cpu(static_cast<const float*>(x.raw()), static_cast<const float*>(weight.raw()),
                 static_cast<float*>(out.mutable_raw()), x.numel() / dim, dim, eps);
  }

  void add(Tensor& x, const Tensor& y) override {
    check_f32(x, "add x");
    check_f32(y, "add y");
    EXL3_CHECK_EQ(x.numel(), y.numel(), "add: ", shape_string(x.shape()), " += ", shape_string(y.shape()));
    add_cpu(static_cast<float*>(x.mutable_raw()), static_cast<const float*>(y.raw()), x.numel());
  }

  void linear(const LinearWeights& w, const Tensor& x, Tensor& y) override {
    check_f32(x, "linear x");
    check_f32(y, "linear y");
    const int64_t m = x.numel() / std::max<int64_t>(w.in_features, 1);
    EXL3_CHECK(x.rank() == 2 && x.dim(1) == w.in_features && y.rank() == 2 && y.dim(0) == x.dim(0) &&
                   y.dim(1) == w.out_features,
               "linear ", w.in_features, "x", w.out_features, ": x ", shape_string(x.shape()), " y ",
               shape_string(y.shape()));
    float* out = static_cast<float*>(y.mutable_raw());
    if (m == 0 || w.out_features == 0) return;
    if (w.in_features == 0) {
      std::memset(out, 0, y.nbytes());
    } else if (w.inner.defined()) {
      // Bias included.
      const auto* suh = static_cast<const uint16_t*>(w.exl3.suh.raw());
      const auto* svh = static_cast<const uint16_t*>(w.exl3.svh.raw());
      exl3_inner_linear_cpu(static_cast<const float*>(x.raw()), m, w.in_features,
                            static_cast<const float*>(w.inner.raw()), w.exl3.k, w.exl3.n, suh, svh,
                            w.bias.defined() ? static_cast<const float*>(w.bias.raw()) : nullptr, w.out_features,
                            use_int8_activations(int8_activations_, w.exl3.bits, w.exl3.codebook, m), out);
      return;
    } else {
      matmul_cpu(static_cast<const float*>(x.raw()), static_cast<const float*>(w.dense.raw()), out, m, w.in_features,
                 w.out_features);
    }
    if (w.bias.defined()) {
      const float* b = static_cast<const float*>(w.bias.raw());
      for (int64_t r = 0; r < m; ++r) add_cpu(out + r * w.out_features, b, w.out_features);
    }
  }

  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    check_f32(gate, "silu_mul gate");
    check_f32(up, "silu_mul up");
    check_f32(out, "silu_mul out");
    EXL3_CHECK(gate.numel() == up.numel() && out.numel() == gate.numel(), "silu_mul shapes");
    silu_mul_cpu(static_cast<const float*>(gate.raw()), static_cast<const float*>(up.raw()),
                 static_cast<float*>(out.mutable_raw()), gate.numel());
  }

  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_scaling) override {
    check_f32(x, "rope x");
    check_f32(inv_freq, "rope inv_freq");
    EXL3_CHECK(x.rank() == 3 && positions.dtype() == DType::kI32 && positions.numel() == x.dim(0) &&
                   2 * inv_freq.numel() <= x.dim(2),
               "rope: x ", shape_string(x.shape()), " positions ", shape_string(positions.shape()));
    rope_cpu(static_cast<float*>(x.mutable_raw()), static_cast<const int32_t*>(positions.raw()),
             static_cast<const float*>(inv_freq.raw()), x.dim(0), x.dim(1), x.dim(2), inv_freq.numel(),
             attention_scaling);
  }

  void kv_write(PagedKv& cache, const Tensor& k, const Tensor& v, const StepMeta& meta) override {
    check_f32(k, "kv_write k");
    check_f32(v, "kv_write v");
    check_cache(cache);
    const int64_t row = cache.kv_heads * cache.head_dim;
    EXL3_CHECK(k.numel() == meta.num_tokens * row && v.numel() == k.numel(), "kv_write: k ", shape_string(k.shape()),
               " for ", meta.num_tokens, " tokens of ", row);
    kv_write_cpu(cache, static_cast<const float*>(k.raw()), static_cast<const float*>(v.raw()), paged_batch(meta));
  }

  void attention(const Tensor& q, const PagedKv& cache, const StepMeta& meta, Tensor& out) override {
    check_f32(q, "attention q");
    check_f32(out, "attention out");
    check_cache(cache);
    EXL3_CHECK(q.rank() == 3 && q.dim(0) == meta.num_tokens && q.dim(2) == cache.head_dim &&
                   q.dim(1) % cache.kv_heads == 0 && out.shape() == q.shape(),
               "attention: q ", shape_string(q.shape()), " over kv_heads ", cache.kv_heads, " head_dim ",
               cache.head_dim);
    attention_cpu(static_cast<const float*>(q.raw()), cache, paged_batch(meta), q.dim(1),
                  static_cast<float*>(out.mutable_raw()));
  }

  void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override {
    check_host(x, "gather_rows x");
    const Shape x_row(x.shape().begin() + 1, x.shape().end()), out_row(out.shape().begin() + 1, out.shape().end());
    EXL3_CHECK(x.dtype() == out.dtype() && rows.dtype() == DType::kI32 && out.dim(0) == rows.numel() && x_row == out_row,
               "gather_rows: x ", shape_string(x.shape()), " rows ", shape_string(rows.shape()), " out ",
               shape_string(out.shape()));
    if (out.dim(0) == 0) return;
    gather_rows_cpu(x.raw(), static_cast<const int32_t*>(rows.raw()), out.mutable_raw(), out.dim(0),
                    static_cast<int64_t>(out.nbytes()) / out.dim(0));
  }

  void copy_columns(const Tensor& src, Tensor& dst, int64_t column) override {
    check_host(src, "copy_columns src");
    check_host(dst, "copy_columns dst");
    EXL3_CHECK(src.rank() == 2 && dst.rank() == 2 && src.dtype() == dst.dtype() && src.dim(0) == dst.dim(0) &&
                   column >= 0 && column + src.dim(1) <= dst.dim(1),
               "copy_columns: src ", shape_string(src.shape()), " into dst ", shape_string(dst.shape()), " at column ",
               column);
    if (src.numel() == 0) return;
    copy_columns_cpu(src.raw(), dst.mutable_raw(), src.dim(0), src.dim(1), dst.dim(1), column,
                     static_cast<int64_t>(dtype_size(src.dtype())));
  }

  void sample(const Tensor& logits, const SampleBatch& batch, Tensor& out) override {
    check_f32(logits, "sample logits");
    check_host(out, "sample out");
    const int64_t rows = static_cast<int64_t>(batch.rows.size());
    EXL3_CHECK(logits.rank() == 2 && logits.dim(0) == rows && logits.dim(1) > 0 && out.dtype() == DType::kI32 &&
                   out.numel() == rows,
               "sample: logits ", shape_string(logits.shape()), " for ", rows, " rows, out ", dtype_name(out.dtype()),
               shape_string(out.shape()));
    const int64_t vocab = logits.dim(1);
    int32_t* ids = static_cast<int32_t*>(out.mutable_raw());
    for (int64_t i = 0; i < rows; ++i) {
      const SampleRow& row = batch.rows[i];
      const std::span<const float> row_logits(logits.data<float>() + i * vocab, vocab);
      ids[i] = sample_cpu(row_logits, row.params, row.prompt_ids, row.output_ids, row.position);
      if (row.params.logprobs > 0) {
        EXL3_CHECK(batch.logprobs != nullptr && batch.logprobs->dtype() == DType::kF32 &&
                       batch.logprobs->rank() == 2 && batch.logprobs->dim(0) == rows &&
                       batch.logprobs->dim(1) == kLogprobWidth && vocab < (1 << 24),
                   "sample: row ", i, " asks for logprobs without an F32 [rows, ", kLogprobWidth, "] output");
        write_logprob_row(token_logprobs_ref(row_logits, ids[i], row.params.logprobs),
                       batch.logprobs->mutable_data<float>() + i * kLogprobWidth);
      }
    }
  }

 private:
  const uint64_t cap_;
  const Int8Activations int8_activations_;
  std::shared_ptr<std::atomic<uint64_t>> live_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(uint64_t cap_bytes) {
  CpuBackendOptions o;
  o.cap_bytes = cap_bytes;
  return make_cpu_backend(o);
}

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace exl3
