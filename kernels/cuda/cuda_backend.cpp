// The CUDA backend (see cuda_backend.h): memory through a capped DeviceAllocator, uploads staged
// through pinned host buffers on the backend's stream (UploadStager), weights converted on the device, and each
// op of kernels/backend.h checked at entry (cuda_checks.h) and handed to its launcher
// (elementwise.cuh, paged_attention.cuh, sample.cuh; linears through cuda_linear.h).
#include "kernels/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/attention_scratch.h"
#include "kernels/cuda/count_nonfinite.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_checks.h"
#include "kernels/cuda/cuda_linear.h"
#include "kernels/cuda/cuda_step_graph.h"
#include "kernels/cuda/dense_linear.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/exl3_decode.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_linear.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/sample.cuh"
#include "kernels/cuda/upload_stager.h"
#include "kernels/fp16.h"

namespace exl3 {
namespace {

// Weights converted on the device (BF16/F32 -> F16) go through a buffer of at most this size, so
// a conversion costs the destination plus 32 MiB rather than twice the tensor.
constexpr size_t kConvertChunkBytes = size_t{32} << 20;

absl::Status cuda_status(cudaError_t err, const std::string& label, const std::string& what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(label, ": ", what, " failed: ", cudaGetErrorString(err)));
}

// Element i of a host F32/F16/BF16 tensor as a float (for messages).
float host_value(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return static_cast<const float*>(t.raw())[i];
    case DType::kF16:
      return half_bits_to_float(static_cast<const uint16_t*>(t.raw())[i]);
    case DType::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(t.raw())[i]);
    default:
      return NAN;
  }
}

// A host F32/BF16 tensor rounded to F16 on the host (round to nearest even).
Tensor host_to_f16(const Tensor& host) {
  const Tensor f32 = host.to_f32();
  Tensor out = Tensor::zeros(DType::kF16, host.shape());
  auto* dst = static_cast<uint16_t*>(out.mutable_raw());
  for (int64_t i = 0; i < out.numel(); ++i) dst[i] = float_to_half_bits(f32.data<float>()[i]);
  return out;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, std::string label, std::string description)
      : device_(options.device),
        description_(std::move(description)),
        allocator_(std::move(label), options.cap_bytes),
        workspace_bytes_(options.cublas_workspace_bytes),
        int8_activations_(options.int8_activations) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_ != nullptr) {
      const cudaError_t err = cudaStreamSynchronize(stream_);
      // A fault already reported by synchronize() comes back here; teardown goes on regardless.
      if (err != cudaSuccess) std::fprintf(stderr, "%s: teardown: %s\n", label().c_str(), cudaGetErrorString(err));
    }
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    stager_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    // Device buffers (workspace, scratch) are freed by their owners after this body.
  }

  // Everything that can fail at construction.
  absl::Status init() {
    EXL3_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), label(), "cudaStreamCreateWithFlags"));
    stager_ = std::make_unique<UploadStager>();
    EXL3_RETURN_IF_ERROR(stager_->init(stream_));
    const cublasStatus_t created = cublasCreate(&cublas_);
    if (created != CUBLAS_STATUS_SUCCESS) {
      cublas_ = nullptr;
      return absl::InternalError(absl::StrCat(label(), ": cublasCreate failed: ", cublasGetStatusString(created)));
    }
    // The stream first: cublasSetStream resets the workspace to cuBLAS's default.
    EXL3_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    if (workspace_bytes_ > 0) {
      EXL3_ASSIGN_OR_RETURN(workspace_, allocator_.allocate(workspace_bytes_, "cuBLAS workspace"));
      EXL3_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_.get(), workspace_bytes_));
    }
    EXL3_ASSIGN_OR_RETURN(check_result_, allocator_.allocate(2 * sizeof(unsigned long long), "F16 range check"));
    return absl::OkStatus();
  }

  cudaStream_t stream() const { return stream_; }
  const std::string& label() const { return allocator_.label(); }

  bool supports_step_graphs() const override { return true; }
  absl::StatusOr<std::unique_ptr<StepGraph>> capture_step(const std::function<absl::Status()>& record) override {
    activate();
    return capture_cuda_graph(stream_, device_, label(), record);
  }
  absl::Status replay_step(StepGraph& graph) override {
    activate();
    return launch_cuda_graph(graph, stream_, label());
  }
  void activate() const { EXL3_CUDA_CHECK(cudaSetDevice(device_)); }

  Device device() const override { return Device::kCuda; }
  std::string description() const override { return description_; }
  DType activation_dtype() const override { return DType::kF16; }
  DType kv_dtype() const override { return DType::kF16; }

  // ---- Memory -------------------------------------------------------------------------------

  absl::StatusOr<Tensor> allocate(DType dtype, const Shape& shape, const std::string& what) override {
    for (int64_t d : shape) EXL3_CHECK(d >= 0, "allocate ", what, ": negative dimension in ", shape_string(shape));
    activate();
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype);
    EXL3_ASSIGN_OR_RETURN(std::shared_ptr<void> memory, allocator_.allocate(bytes, what));
    if (bytes > 0) EXL3_CUDA_CHECK(cudaMemsetAsync(memory.get(), 0, bytes, stream_));
    void* data = memory.get();
    // An empty tensor holds no device memory but is still a defined tensor.
    std::shared_ptr<const void> owner = memory ? std::shared_ptr<const void>(std::move(memory))
                                               : std::make_shared<const char>('\0');
    return Tensor::wrap(Device::kCuda, dtype, shape, data, std::move(owner));
  }
  uint64_t allocated_bytes() const override { return allocator_.allocated_bytes(); }
  uint64_t cap_bytes() const override { return allocator_.cap_bytes(); }

  void upload(const Tensor& host, Tensor& dst) override {
    EXL3_CHECK(host.defined() && host.on_host(), "upload source must be a host tensor");
    check_device(dst, "upload destination");
    EXL3_CHECK(host.dtype() == dst.dtype() && host.numel() == dst.numel(), "upload ", dtype_name(host.dtype()),
               shape_string(host.shape()), " into ", dtype_name(dst.dtype()), shape_string(dst.shape()));
    activate();
    stager_->stage(host.raw(), dst.mutable_raw(), host.nbytes());
  }

  void download(const Tensor& src, Tensor& host) override {
    check_device(src, "download source");
    EXL3_CHECK(host.defined() && host.on_host(), "download destination must be a host tensor");
    EXL3_CHECK(host.dtype() == src.dtype() && host.numel() == src.numel(), "download ", dtype_name(src.dtype()),
               shape_string(src.shape()), " into ", dtype_name(host.dtype()), shape_string(host.shape()));
    activate();
    if (src.nbytes() > 0) {
      EXL3_CUDA_CHECK(cudaMemcpyAsync(host.mutable_raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    }
    EXL3_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  absl::Status synchronize() override {
    activate();
    const cudaError_t err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) {
      return absl::InternalError(absl::StrCat(label(), " (", description_, "): device fault: ", cudaGetErrorName(err),
                                              ": ", cudaGetErrorString(err)));
    }
    return absl::OkStatus();
  }

  // ---- Weights --------------------------------------------------------------------------------

  absl::StatusOr<LinearWeights> prepare_linear(const HostLinear& h, const std::string& name) override {
    if (h.in_features <= 0 || h.out_features <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": linear of ", h.in_features, " inputs and ", h.out_features, " outputs"));
    }
    LinearWeights w;
    w.in_features = h.in_features;
    w.out_features = h.out_features;
    w.is_exl3 = h.is_exl3;
    if (h.is_exl3) {
      EXL3_RETURN_IF_ERROR(validate_exl3(h, name));
      const Exl3Weight& e = h.exl3;
      w.exl3.k = e.k;
      w.exl3.n = e.n;
      w.exl3.bits = e.bits;
      w.exl3.codebook = e.codebook;
      EXL3_ASSIGN_OR_RETURN(w.exl3.trellis, to_device(e.trellis, DType::kI16, absl::StrCat(name, ".trellis")));
      EXL3_ASSIGN_OR_RETURN(w.exl3.suh, to_device(e.suh, DType::kF16, absl::StrCat(name, ".suh")));
      EXL3_ASSIGN_OR_RETURN(w.exl3.svh, to_device(e.svh, DType::kF16, absl::StrCat(name, ".svh")));
      w.bytes = w.exl3.trellis.nbytes() + w.exl3.suh.nbytes() + w.exl3.svh.nbytes();
    } else {
      const Tensor& d = h.dense;
      if (!d.defined() || !d.on_host() || !is_float_dtype(d.dtype()) ||
          d.shape() != Shape({h.out_features, h.in_features})) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": dense weight must be a host F32/F16/BF16 tensor [", h.out_features, ", ", h.in_features, "], got ",
            d.defined() ? dtype_name(d.dtype()) : "none", " ", shape_string(d.shape())));
      }
      // Resident as F16 [out, in] for cuBLAS. BF16 and F32 are rounded to F16 (to nearest); a value
      // beyond the F16 range is refused by name (to_device), values below 2^-14 become subnormal.
      EXL3_ASSIGN_OR_RETURN(w.dense, to_device(d, DType::kF16, name));
      w.bytes = w.dense.nbytes();
    }
    if (h.bias.defined()) {
      if (!h.bias.on_host() || !is_float_dtype(h.bias.dtype()) || h.bias.numel() != h.out_features) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": bias must be a host float tensor of ", h.out_features,
                                                       " values, got ", dtype_name(h.bias.dtype()), " ",
                                                       shape_string(h.bias.shape())));
      }
      // F16/BF16 -> F32 is exact.
      EXL3_ASSIGN_OR_RETURN(w.bias,
                            to_device(h.bias.reshape({h.out_features}), DType::kF32, absl::StrCat(name, ".bias")));
      w.bytes += w.bias.nbytes();
    }
    return w;
  }

  absl::StatusOr<Tensor> prepare_tensor(const Tensor& host, DType dtype, const std::string& name) override {
    if (!is_float_dtype(dtype) || !host.defined() || !is_float_dtype(host.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": prepare_tensor converts between F32, F16 and BF16, not ",
                                                     host.defined() ? dtype_name(host.dtype()) : "none", " -> ",
                                                     dtype_name(dtype)));
    }
    return to_device(host, dtype, name);
  }

  absl::StatusOr<Tensor> prepare_host_table(const Tensor& host, DType dtype, const std::string& name) override {
    if (!host.defined() || !host.on_host() || !is_float_dtype(host.dtype()) ||
        (dtype != host.dtype() && dtype != DType::kF16)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": a host table keeps its stored F32/F16/BF16 dtype or ",
                                                     "becomes F16, not ", host.defined() ? dtype_name(host.dtype()) : "none",
                                                     " -> ", dtype_name(dtype)));
    }
    activate();
    const Tensor source = dtype == host.dtype() ? host : host_to_f16(host);
    void* pinned = nullptr;
    const size_t bytes = std::max<size_t>(source.nbytes(), 1);
    const cudaError_t err = cudaHostAlloc(&pinned, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat(label(), ": pinning ", bytes, " bytes of host memory for ", name,
                                                       " failed: ", cudaGetErrorString(err)));
    }
    std::memcpy(pinned, source.raw(), source.nbytes());
    void* device_view = nullptr;
    EXL3_CUDA_CHECK(cudaHostGetDevicePointer(&device_view, pinned, 0));
    host_table_bytes_ += bytes;
    std::shared_ptr<const void> owner(pinned, [](const void* p) { cudaFreeHost(const_cast<void*>(p)); });
    return Tensor::wrap(Device::kCuda, dtype, host.shape(), device_view, std::move(owner));
  }
  uint64_t host_table_bytes() const override { return host_table_bytes_; }

  absl::Status reserve_pool(uint64_t bytes) override {
    activate();
    return allocator_.reserve_pool(bytes, "weights and KV cache pool");
  }

  // What the linear paths (cuda_linear.h) use of this backend. Each call counts as a use of the
  // linear scratch (linear_scratch_uses_), which voids a hand-off prepared before it.
  CudaLinearContext linear_context() {
    ++linear_scratch_uses_;
    CudaLinearContext c;
    c.stream = stream_;
    c.cublas = cublas_;
    c.scratch_a = static_cast<__half*>(scratch_a_.get());
    c.scratch_c = static_cast<float*>(scratch_c_.get());
    c.scratch_rows = scratch_rows_;
    c.scratch_features = scratch_features_;
    c.dequant_staging = static_cast<__half*>(dequant_staging_.get());
    c.int8_activations = int8_activations_;
    // The hand-off's staged inputs share scratch_a (CudaLinearContext::handoff says why that is safe).
    c.handoff = static_cast<uint32_t*>(scratch_a_.get());
    c.handoff_words = scratch_rows_ * scratch_features_ / 2;
    return c;
  }

  // What the linear_add before prepared for this norm (NormHandoff), checked against the norm and
  // linears it is given, and cleared; null where nothing was prepared or a use of the linear
  // scratch since (another linear, a reallocation) voided it: the norm op then computes without it
  // from the residual, written whole.
  const std::array<const void*, 3>* take_handoff(NormHandoff* handoff, const Tensor& x, const Tensor& norm_weight,
                                                 std::span<const LinearWeights* const> ws) const {
    if (handoff == nullptr || !handoff->prepared) return nullptr;
    handoff->prepared = false;
    bool same = handoff->residual == x.raw() && x.rank() == 2 && handoff->rows == x.dim(0) &&
                handoff->norm_weight != nullptr && handoff->norm_weight->raw() == norm_weight.raw() &&
                handoff->count == static_cast<int>(ws.size());
    for (size_t i = 0; same && i < ws.size(); ++i) same = handoff->linears[i] == ws[i];
    EXL3_CHECK(same, "norm hand-off: prepared for another residual, norm or linears");
    return handoff->scratch_uses == linear_scratch_uses_ ? &handoff->inputs : nullptr;
  }

  // What the gated product before prepared for this linear's x (InputHandoff), checked against the
  // linear and x it is given, and cleared; null where nothing was prepared or a use of the linear
  // scratch since voided it (x, written whole, is then staged as usual).
  const void* take_input_handoff(InputHandoff* input, const LinearWeights& w, const Tensor& x) const {
    if (input == nullptr || !input->prepared) return nullptr;
    input->prepared = false;
    const bool same = input->linear == &w && input->input == x.raw() && x.rank() == 2 && input->rows == x.dim(0);
    EXL3_CHECK(same, "input hand-off: prepared for another linear or input");
    return input->scratch_uses == linear_scratch_uses_ ? input->staged : nullptr;
  }

  void linear(const LinearWeights& w, const Tensor& x, Tensor& y) override { cuda_linear(linear_context(), w, x, y); }

  void linears(std::span<const LinearWeights* const> ws, const Tensor& x, std::span<Tensor> ys) override {
    if (!cuda_fused_linears(linear_context(), ws, x, ys, GemvEpilogue::kStore)) Backend::linears(ws, x, ys);
  }

  // gate and up of x (with `norm`, of its fused RMSNorm) in one GEMV launch whose output pass forms
  // the gated product, and with `next` stages the input of the linear that reads it where it can
  // (cuda_input_handoff); false, with nothing queued, where they do not fit it.
  bool fused_gate_up_silu(const LinearWeights& gate, const LinearWeights& up, const Tensor& x, const Tensor& gate_out,
                          Tensor& up_out, Tensor& act, const FusedNorm* norm, InputHandoff* next) {
    if (next != nullptr) next->prepared = false;
    const LinearWeights* ws[] = {&gate, &up};
    Tensor ys[] = {act, up_out};  // the gated product lands in the first output
    const bool shaped = act.dtype() == DType::kF16 && act.shape() == gate_out.shape();
    if (!shaped) return false;
    const CudaLinearContext ctx = linear_context();
    GemvInputHandoff h;
    const bool hand_off = next != nullptr && next->linear != nullptr && act.rank() == 2 && gate.exl3.n == act.dim(1) &&
                          cuda_input_handoff(ctx, *next->linear, act.dim(0), act.dim(1), h);
    if (!cuda_fused_linears(ctx, ws, x, ys, GemvEpilogue::kSiluMul, norm, nullptr, nullptr, hand_off ? &h : nullptr)) {
      return false;
    }
    if (hand_off) {
      next->prepared = true;
      next->input = act.raw();
      next->rows = act.dim(0);
      next->staged = h.staged;
      next->scratch_uses = linear_scratch_uses_;
    }
    return true;
  }

  void gate_up_silu(const LinearWeights& gate, const LinearWeights& up, const Tensor& x, Tensor& gate_out,
                    Tensor& up_out, Tensor& act, InputHandoff* next) override {
    if (!fused_gate_up_silu(gate, up, x, gate_out, up_out, act, nullptr, next)) {
      Backend::gate_up_silu(gate, up, x, gate_out, up_out, act, next);
    }
  }

  void norm_linears(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                    std::span<const LinearWeights* const> ws, std::span<Tensor> ys, NormHandoff* handoff) override {
    const FusedNorm norm{x, norm_weight, eps, take_handoff(handoff, x, norm_weight, ws)};
    if (!cuda_fused_linears(linear_context(), ws, h, ys, GemvEpilogue::kStore, &norm)) {
      Backend::norm_linears(x, norm_weight, eps, h, ws, ys, nullptr);
    }
  }

  void norm_gate_up_silu(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h, const LinearWeights& gate,
                         const LinearWeights& up, Tensor& gate_out, Tensor& up_out, Tensor& act, NormHandoff* handoff,
                         InputHandoff* next) override {
    const LinearWeights* ws[] = {&gate, &up};
    const FusedNorm norm{x, norm_weight, eps, take_handoff(handoff, x, norm_weight, ws)};
    if (!fused_gate_up_silu(gate, up, h, gate_out, up_out, act, &norm, next)) {
      Backend::norm_gate_up_silu(x, norm_weight, eps, h, gate, up, gate_out, up_out, act, nullptr, next);
    }
  }

  // One GEMV launch whose output pass rotates q and k and writes the cache (GemvEpilogue::
  // kRopeKvWrite) where the rows take the few-rows path (up to kGemvMaxRows; the RMSNorm fused too
  // up to kGemvNormMaxRows, launched before above), the cache is 16-bit and the heads 128 wide and
  // rotated whole; else the composition.
  void norm_qkv_rope_kv_write(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                              std::span<const LinearWeights* const> qkv, Tensor& q, Tensor& k, Tensor& v,
                              const Tensor& inv_freq, float attention_scaling, PagedKv& cache, const StepMeta& meta,
                              NormHandoff* handoff) override {
    const bool fits = cache.k_bits == 16 && cache.v_bits == 16 && cache.head_dim == kGemvRopeHeadDim &&
                      inv_freq.dtype() == DType::kF32 && 2 * inv_freq.numel() == kGemvRopeHeadDim && q.rank() == 3 &&
                      k.rank() == 3 && v.rank() == 3 && q.dtype() == DType::kF16 && k.dtype() == DType::kF16 &&
                      v.dtype() == DType::kF16 && q.dim(0) == meta.num_tokens && q.dim(2) == kGemvRopeHeadDim &&
                      k.shape() == v.shape() &&
                      k.shape() == Shape({meta.num_tokens, cache.kv_heads, kGemvRopeHeadDim}) &&
                      meta.num_tokens == x.dim(0) && meta.num_tokens <= kGemvMaxRows;
    if (fits) {
      const int64_t num_pages = check_cache(cache);
      check_meta(meta);
      GemvRopeKv rope;
      rope.batch = paged_batch(meta, cache.page_size);
      rope.inv_freq = ptr<float>(inv_freq);
      rope.attention_scaling = attention_scaling;
      rope.k_pages = mut<__half>(cache.k_pages);
      rope.v_pages = mut<__half>(cache.v_pages);
      rope.num_pages = num_pages;
      const int64_t n = meta.num_tokens;
      Tensor ys[] = {q.reshape({n, q.dim(1) * q.dim(2)}), k.reshape({n, k.dim(1) * k.dim(2)}),
                     v.reshape({n, v.dim(1) * v.dim(2)})};
      const std::array<const void*, 3>* staged = take_handoff(handoff, x, norm_weight, qkv);
      if (staged != nullptr || n <= kGemvNormMaxRows) {
        const FusedNorm norm{x, norm_weight, eps, staged};
        if (cuda_fused_linears(linear_context(), qkv, h, ys, GemvEpilogue::kRopeKvWrite, &norm, &rope)) return;
      } else {
        rms_norm(x, norm_weight, eps, h);
        if (!cuda_fused_linears(linear_context(), qkv, h, ys, GemvEpilogue::kRopeKvWrite, nullptr, &rope)) {
          linears(qkv, h, ys);
          rope_kv_write(q, k, v, inv_freq, attention_scaling, cache, meta);
        }
        return;
      }
    }
    Backend::norm_qkv_rope_kv_write(x, norm_weight, eps, h, qkv, q, k, v, inv_freq, attention_scaling, cache, meta,
                                    handoff);
  }

  // With `next`, the output pass also does the next RMSNorm's work for its linears where it can
  // (cuda_linear_add_handoff).
  // x may come staged by the gated product before (`input`, take_input_handoff).
  void linear_add(const LinearWeights& w, const Tensor& x, Tensor& out, Tensor& residual, NormHandoff* next,
                  InputHandoff* input) override {
    const void* staged_x = take_input_handoff(input, w, x);
    if (next != nullptr) {
      next->prepared = false;
      std::array<const void*, 3> staged{};
      const std::span<const LinearWeights* const> consumers(next->linears.data(), static_cast<size_t>(next->count));
      if (next->norm_weight != nullptr && cuda_linear_add_handoff(linear_context(), w, x, residual, *next->norm_weight,
                                                                  next->eps, consumers, staged, staged_x)) {
        next->prepared = true;
        next->residual = residual.raw();
        next->rows = x.dim(0);
        next->inputs = staged;
        next->scratch_uses = linear_scratch_uses_;
        return;
      }
    }
    const LinearWeights* ws[] = {&w};
    Tensor ys[] = {residual};
    if (residual.dtype() != DType::kF32 ||
        !cuda_fused_linears(linear_context(), ws, x, ys, GemvEpilogue::kAddResidual, nullptr, nullptr, staged_x)) {
      Backend::linear_add(w, x, out, residual, nullptr, nullptr);
    }
  }

  // Linear and attention scratch (see cuda_backend.h); keeps the larger of the old and new sizes.
  absl::Status reserve_scratch(int64_t max_rows, int64_t max_features) override {
    if (max_rows <= 0 || max_features <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reserve_scratch: max_rows ", max_rows, ", max_features ", max_features));
    }
    if (max_rows <= scratch_rows_ && max_features <= scratch_features_) return absl::OkStatus();
    const int64_t rows = std::max(max_rows, scratch_rows_);
    const int64_t features = std::max(max_features, scratch_features_);
    activate();
    // Queued ops may still read the old scratch; release it before the new one is counted.
    EXL3_RETURN_IF_ERROR(synchronize());
    ++linear_scratch_uses_;  // a hand-off into the old scratch is void
    scratch_a_.reset();
    scratch_c_.reset();
    attention_scratch_.reset();
    scratch_rows_ = scratch_features_ = 0;
    attention_scratch_floats_ = 0;
    const uint64_t elements = static_cast<uint64_t>(rows * features);
    EXL3_ASSIGN_OR_RETURN(scratch_a_,
                          allocator_.allocate(elements * sizeof(__half),
                                              absl::StrCat("linear scratch F16 [", rows, ", ", features, "]")));
    EXL3_ASSIGN_OR_RETURN(
        scratch_c_,
        allocator_.allocate(elements * sizeof(float), absl::StrCat("linear scratch F32 [", rows, ", ", features, "]")));
    scratch_rows_ = rows;
    scratch_features_ = features;

    // Bounds every attention this backend will be asked to run (attention() checks it anyway).
    const int64_t floats = attention_scratch::reserve_floats(rows, features);
    EXL3_ASSIGN_OR_RETURN(attention_scratch_,
                          allocator_.allocate(static_cast<uint64_t>(floats) * sizeof(float),
                                              absl::StrCat("attention scratch (", floats, " floats)")));
    attention_scratch_floats_ = floats;
    if (!dequant_staging_) {
      EXL3_ASSIGN_OR_RETURN(dequant_staging_, allocator_.allocate(kDequantChunkBytes, "EXL3 prefill staging (fp16 Wq rows)"));
    }
    return absl::OkStatus();
  }

  // Sampler buffers: row parameters, histories and launch_sample's scratch; keeps the larger of
  // the old and new sizes.
  absl::Status reserve_sampling(int64_t max_rows, int64_t vocab, int64_t max_history_tokens) override {
    if (max_rows <= 0 || vocab <= 0 || max_history_tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat("reserve_sampling: max_rows ", max_rows, ", vocab ", vocab,
                                                     ", max_history_tokens ", max_history_tokens));
    }
    const int64_t rows = std::max(max_rows, sample_rows_);
    const int64_t history = std::max(max_history_tokens, sample_history_);
    const uint64_t scratch = std::max<uint64_t>(sample_scratch_bytes(rows, vocab), sample_scratch_bytes_);
    if (rows == sample_rows_ && history == sample_history_ && scratch == sample_scratch_bytes_) {
      return absl::OkStatus();
    }
    activate();
    // Queued samples may still read the old buffers; release them before the new ones are counted.
    EXL3_RETURN_IF_ERROR(synchronize());
    sample_params_.reset();
    sample_history_buffer_.reset();
    sample_scratch_.reset();
    sample_rows_ = sample_history_ = 0;
    sample_scratch_bytes_ = 0;
    EXL3_ASSIGN_OR_RETURN(sample_params_,
                          allocator_.allocate(static_cast<uint64_t>(rows) * sizeof(DeviceSampleRow),
                                              absl::StrCat("sampler row parameters [", rows, "]")));
    EXL3_ASSIGN_OR_RETURN(sample_history_buffer_,
                          allocator_.allocate(static_cast<uint64_t>(std::max<int64_t>(history, 1)) * sizeof(int32_t),
                                              absl::StrCat("sampler token histories [", history, "]")));
    EXL3_ASSIGN_OR_RETURN(sample_scratch_,
                          allocator_.allocate(scratch, absl::StrCat("sampler scratch (", rows, " rows of ", vocab,
                                                                    " logits)")));
    sample_rows_ = rows;
    sample_history_ = history;
    sample_scratch_bytes_ = scratch;
    return absl::OkStatus();
  }

  // ---- Ops ----------------------------------------------------------------------------------

  void zero(Tensor& t) override {
    check_device(t, "zero");
    if (t.nbytes() > 0) EXL3_CUDA_CHECK(cudaMemsetAsync(t.mutable_raw(), 0, t.nbytes(), stream_));
  }

  void embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    check_device(table, "embedding table");
    EXL3_CHECK(is_float_dtype(table.dtype()) && table.rank() == 2,
               "embedding table must be F32/F16/BF16 [vocab, d], got ", dtype_name(table.dtype()), " ",
               shape_string(table.shape()));
    check_dtype(ids, DType::kI32, "embedding ids");
    check_dtype(out, DType::kF32, "embedding out");
    const int64_t n = ids.numel(), dim = table.dim(1);
    EXL3_CHECK(out.numel() == n * dim, "embedding out ", shape_string(out.shape()), " for ", n, " ids of ", dim);
    EmbeddingParams p;
    p.table = table.raw();
    p.table_dtype = table.dtype();
    p.ids = ptr<int32_t>(ids);
    p.out = mut<float>(out);
    p.n = n;
    p.dim = dim;
    p.vocab = table.dim(0);
    launch_embedding(p, stream_);
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    check_f32_or_f16(x, "rms_norm x");
    check_f32_or_f16(out, "rms_norm out");
    check_dtype(weight, DType::kF32, "rms_norm weight");
    const int64_t dim = weight.numel();
    EXL3_CHECK(dim > 0 && x.numel() % dim == 0 && out.numel() == x.numel(), "rms_norm: x ", shape_string(x.shape()),
               " out ", shape_string(out.shape()), " weight ", shape_string(weight.shape()));
    // Empty views of a workspace may share an address: only tensors with elements can alias.
    EXL3_CHECK(x.numel() == 0 || x.raw() != out.raw() || x.dtype() == out.dtype(), "rms_norm in place needs one dtype");
    RmsNormParams p;
    p.x = x.raw();
    p.x_dtype = x.dtype();
    p.weight = ptr<float>(weight);
    p.out = out.mutable_raw();
    p.out_dtype = out.dtype();
    p.rows = x.numel() / dim;
    p.dim = dim;
    p.eps = eps;
    launch_rms_norm(p, stream_);
  }

  void add(Tensor& x, const Tensor& y) override {
    check_dtype(x, DType::kF32, "add x");
    check_f32_or_f16(y, "add y");
    EXL3_CHECK(x.numel() == y.numel(), "add: x ", shape_string(x.shape()), " y ", shape_string(y.shape()));
    AddParams p;
    p.x = mut<float>(x);
    p.y = y.raw();
    p.y_dtype = y.dtype();
    p.n = x.numel();
    launch_add(p, stream_);
  }

  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    check_dtype(gate, DType::kF16, "silu_mul gate");
    check_dtype(up, DType::kF16, "silu_mul up");
    check_dtype(out, DType::kF16, "silu_mul out");
    EXL3_CHECK(gate.shape() == up.shape() && out.numel() == gate.numel(), "silu_mul: gate ", shape_string(gate.shape()),
               " up ", shape_string(up.shape()), " out ", shape_string(out.shape()));
    SiluMulParams p;
    p.gate = ptr<__half>(gate);
    p.up = ptr<__half>(up);
    p.out = mut<__half>(out);
    p.n = gate.numel();
    launch_silu_mul(p, stream_);
  }

  void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_scaling) override {
    check_dtype(x, DType::kF16, "rope x");
    check_dtype(positions, DType::kI32, "rope positions");
    check_dtype(inv_freq, DType::kF32, "rope inv_freq");
    EXL3_CHECK(x.rank() == 3, "rope x must be [tokens, heads, head_dim], got ", shape_string(x.shape()));
    EXL3_CHECK(positions.numel() == x.dim(0), "rope: ", positions.numel(), " positions for ", x.dim(0), " tokens");
    EXL3_CHECK(2 * inv_freq.numel() <= x.dim(2), "rope: rotary dim ", 2 * inv_freq.numel(), " > head_dim ", x.dim(2));
    RopeParams p;
    p.x = mut<__half>(x);
    p.positions = ptr<int32_t>(positions);
    p.inv_freq = ptr<float>(inv_freq);
    p.tokens = x.dim(0);
    p.heads = x.dim(1);
    p.head_dim = x.dim(2);
    p.rotary_dim = 2 * inv_freq.numel();
    p.attention_scaling = attention_scaling;
    launch_rope(p, stream_);
  }

  void kv_write(PagedKv& cache, const Tensor& k, const Tensor& v, const StepMeta& meta) override {
    const int64_t num_pages = check_cache(cache);
    check_meta(meta);
    check_dtype(k, DType::kF16, "kv_write k");
    check_dtype(v, DType::kF16, "kv_write v");
    const int64_t kv_heads = cache.kv_heads, head_dim = cache.head_dim;
    EXL3_CHECK(k.shape() == v.shape() && k.shape() == Shape({meta.num_tokens, kv_heads, head_dim}), "kv_write: k ",
               shape_string(k.shape()), " v ", shape_string(v.shape()), " for ", meta.num_tokens, " tokens of ",
               kv_heads, " KV heads of ", head_dim);
    KvWriteParams p;
    p.k = ptr<__half>(k);
    p.v = ptr<__half>(v);
    set_cache_sides(cache, p);
    p.kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.num_pages = num_pages;
    p.batch = paged_batch(meta, cache.page_size);
    launch_kv_write(p, stream_);
  }

  void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& inv_freq, float attention_scaling,
                     PagedKv& cache, const StepMeta& meta) override {
    if (cache.k_bits != 16 || cache.v_bits != 16) {
      // A quantized side: rope of q and k, then the quantizing kv_write (the fused kernel copies F16).
      Backend::rope_kv_write(q, k, v, inv_freq, attention_scaling, cache, meta);
      return;
    }
    const int64_t num_pages = check_cache(cache);
    check_meta(meta);
    for (const Tensor* t : {static_cast<const Tensor*>(&q), static_cast<const Tensor*>(&k), &v}) {
      check_dtype(*t, DType::kF16, "rope_kv_write q/k/v");
    }
    check_dtype(inv_freq, DType::kF32, "rope_kv_write inv_freq");
    const int64_t kv_heads = cache.kv_heads, head_dim = cache.head_dim;
    EXL3_CHECK(q.rank() == 3 && q.dim(0) == meta.num_tokens && q.dim(2) == head_dim, "rope_kv_write q ",
               shape_string(q.shape()), " for ", meta.num_tokens, " tokens of head_dim ", head_dim);
    EXL3_CHECK(k.shape() == v.shape() && k.shape() == Shape({meta.num_tokens, kv_heads, head_dim}), "rope_kv_write: k ",
               shape_string(k.shape()), " v ", shape_string(v.shape()), " for ", meta.num_tokens,
               " tokens and pages ", shape_string(cache.k_pages.shape()));
    EXL3_CHECK(2 * inv_freq.numel() <= head_dim, "rope_kv_write: rotary dim ", 2 * inv_freq.numel(), " > head_dim ",
               head_dim);
    RopeKvWriteParams p;
    p.q = mut<__half>(q);
    p.k = mut<__half>(k);
    p.v = ptr<__half>(v);
    p.k_pages = mut<__half>(cache.k_pages);
    p.v_pages = mut<__half>(cache.v_pages);
    p.inv_freq = ptr<float>(inv_freq);
    p.attention_scaling = attention_scaling;
    p.heads = q.dim(1);
    p.kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.rotary_dim = 2 * inv_freq.numel();
    p.num_pages = num_pages;
    p.batch = paged_batch(meta, cache.page_size);
    launch_rope_kv_write(p, stream_);
  }

  void attention(const Tensor& q, const PagedKv& cache, const StepMeta& meta, Tensor& out) override {
    const int64_t num_pages = check_cache(cache);
    check_meta(meta);
    check_dtype(q, DType::kF16, "attention q");
    check_dtype(out, DType::kF16, "attention out");
    EXL3_CHECK(q.rank() == 3 && q.dim(0) == meta.num_tokens && out.shape() == q.shape(), "attention: q ",
               shape_string(q.shape()), " out ", shape_string(out.shape()), " for ", meta.num_tokens, " tokens");
    const int64_t heads = q.dim(1), head_dim = q.dim(2), kv_heads = cache.kv_heads;
    EXL3_CHECK(cache.head_dim == head_dim && heads % kv_heads == 0, "attention: ", heads, " heads of ", head_dim,
               " over ", kv_heads, " KV heads of ", cache.head_dim);
    const int64_t needed = attention_scratch_floats(meta.num_tokens, heads, head_dim);
    EXL3_CHECK(needed <= attention_scratch_floats_, "attention of ", meta.num_tokens, " tokens of ", heads,
               " heads needs ", needed, " scratch floats, ", attention_scratch_floats_, " reserved by reserve_scratch");
    if (meta.num_tokens == 0) return;
    AttentionParams p;
    p.q = ptr<__half>(q);
    set_cache_sides(cache, p);
    p.window = cache.window;
    p.out = mut<__half>(out);
    p.heads = heads;
    p.kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.num_pages = num_pages;
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    p.batch = paged_batch(meta, cache.page_size);
    p.scratch = static_cast<float*>(attention_scratch_.get());
    p.scratch_floats = attention_scratch_floats_;
    launch_attention(p, stream_);
  }

  void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override {
    check_device(x, "gather_rows x");
    check_device(out, "gather_rows out");
    check_dtype(rows, DType::kI32, "gather_rows rows");
    EXL3_CHECK(x.dtype() == out.dtype() && x.rank() >= 1 && out.rank() == x.rank() && out.dim(0) == rows.numel(),
               "gather_rows: x ", dtype_name(x.dtype()), shape_string(x.shape()), " out ", dtype_name(out.dtype()),
               shape_string(out.shape()), " rows ", shape_string(rows.shape()));
    const int64_t row_elements = x.dim(0) == 0 ? 0 : x.numel() / x.dim(0);
    EXL3_CHECK(out.numel() == rows.numel() * row_elements, "gather_rows: rows of x and out differ: x ",
               shape_string(x.shape()), " out ", shape_string(out.shape()));
    GatherRowsParams p;
    p.x = x.raw();
    p.out = out.mutable_raw();
    p.rows = ptr<int32_t>(rows);
    p.num_rows = rows.numel();
    p.row_bytes = row_elements * static_cast<int64_t>(dtype_size(x.dtype()));
    p.src_rows = x.dim(0);
    launch_gather_rows(p, stream_);
  }

  void copy_columns(const Tensor& src, Tensor& dst, int64_t column) override {
    check_device(src, "copy_columns src");
    check_device(dst, "copy_columns dst");
    EXL3_CHECK(src.rank() == 2 && dst.rank() == 2 && src.dtype() == dst.dtype() && src.dim(0) == dst.dim(0) &&
                   column >= 0 && column + src.dim(1) <= dst.dim(1),
               "copy_columns: src ", shape_string(src.shape()), " into dst ", shape_string(dst.shape()), " at column ",
               column);
    if (src.numel() == 0) return;
    const size_t elem = dtype_size(src.dtype());
    EXL3_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(dst.mutable_raw()) + column * elem, dst.dim(1) * elem,
                                      src.raw(), src.dim(1) * elem, src.dim(1) * elem, src.dim(0),
                                      cudaMemcpyDeviceToDevice, stream_));
  }

  void sample(const Tensor& logits, const SampleBatch& batch, Tensor& out) override {
    check_dtype(logits, DType::kF32, "sample logits");
    check_dtype(out, DType::kI32, "sample out");
    const int64_t rows = static_cast<int64_t>(batch.rows.size());
    EXL3_CHECK(logits.rank() == 2 && logits.dim(0) == rows && logits.dim(1) > 0 && out.numel() == rows,
               "sample: logits ", shape_string(logits.shape()), " for ", rows, " rows, out ", shape_string(out.shape()));
    if (rows == 0) return;
    const int64_t vocab = logits.dim(1);
    const int64_t history = batch.history_tokens();
    EXL3_CHECK(rows <= sample_rows_ && history <= sample_history_ &&
                   sample_scratch_bytes(rows, vocab) <= sample_scratch_bytes_,
               "sample: ", rows, " rows of ", vocab, " logits with ", history, " history tokens, but reserve_sampling ",
               "reserved ", sample_rows_, " rows, ", sample_history_, " history tokens and ", sample_scratch_bytes_,
               " scratch bytes");
    host_rows_.resize(static_cast<size_t>(rows));
    host_history_.clear();
    for (int64_t i = 0; i < rows; ++i) {
      const SampleRow& row = batch.rows[i];
      EXL3_CHECK(row.position >= 0, "sample: row ", i, " position ", row.position);
      DeviceSampleRow& d = host_rows_[i];
      d = DeviceSampleRow{};
      d.temperature = row.params.temperature;
      d.top_k = row.params.top_k;
      d.top_p = row.params.top_p;
      d.min_p = row.params.min_p;
      d.repetition_penalty = row.params.repetition_penalty;
      d.presence_penalty = row.params.presence_penalty;
      d.frequency_penalty = row.params.frequency_penalty;
      d.seed_lo = static_cast<uint32_t>(row.params.seed);
      d.seed_hi = static_cast<uint32_t>(row.params.seed >> 32);
      d.position = row.position;
      d.history_begin = static_cast<int32_t>(host_history_.size());
      if (SampleBatch::reads_history(row.params)) {
        host_history_.insert(host_history_.end(), row.prompt_ids.begin(), row.prompt_ids.end());
        host_history_.insert(host_history_.end(), row.output_ids.begin(), row.output_ids.end());
        for (size_t h = static_cast<size_t>(d.history_begin); h < host_history_.size(); ++h) {
          EXL3_CHECK(host_history_[h] >= 0 && host_history_[h] < vocab, "sample: row ", i, " history token ",
                     host_history_[h], " outside [0, ", vocab, ")");
        }
        d.prompt_len = static_cast<int32_t>(row.prompt_ids.size());
        d.output_len = static_cast<int32_t>(row.output_ids.size());
      }
      d.typical_p = row.params.typical_p;
      d.xtc_threshold = row.params.xtc_threshold;
      d.xtc_probability = row.params.xtc_probability;
      d.temperature_last = row.params.temperature_last ? 1 : 0;
      d.logprobs = row.params.logprobs;
      d.bias_begin = static_cast<int32_t>(host_history_.size());
      d.bias_count = append_sample_biases(row.params, row.prompt_ids, row.output_ids, host_history_);
      for (size_t b = static_cast<size_t>(d.bias_begin); b < host_history_.size(); b += 3) {
        EXL3_CHECK(host_history_[b] >= 0 && host_history_[b] < vocab, "sample: row ", i, " biased token ",
                   host_history_[b], " outside [0, ", vocab, ")");
      }
    }
    stager_->stage(host_rows_.data(), sample_params_.get(), host_rows_.size() * sizeof(DeviceSampleRow));
    if (!host_history_.empty()) {
      stager_->stage(host_history_.data(), sample_history_buffer_.get(), host_history_.size() * sizeof(int32_t));
    }
    SampleParams p;
    p.logits = ptr<float>(logits);
    p.rows = rows;
    p.vocab = vocab;
    p.row_params = static_cast<const DeviceSampleRow*>(sample_params_.get());
    p.history = host_history_.empty() ? nullptr : static_cast<const int32_t*>(sample_history_buffer_.get());
    p.out = mut<int32_t>(out);
    p.scratch = sample_scratch_.get();
    if (batch.logprobs != nullptr) {
      check_dtype(*batch.logprobs, DType::kF32, "sample logprobs");
      EXL3_CHECK(batch.logprobs->rank() == 2 && batch.logprobs->dim(0) == rows &&
                     batch.logprobs->dim(1) == kLogprobWidth,
                 "sample: logprobs ", shape_string(batch.logprobs->shape()));
      p.logprobs = mut<float>(*batch.logprobs);
      p.logprobs_stride = kLogprobWidth;
    }
    for (const SampleRow& row : batch.rows) {
      EXL3_CHECK(row.params.logprobs == 0 || batch.logprobs != nullptr, "sample: a row asks for logprobs without "
                 "SampleBatch::logprobs");
    }
    launch_sample(p, stream_);
  }

  DeviceMemoryReport memory_report() const {
    activate();
    size_t free_bytes = 0, total_bytes = 0;
    EXL3_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    DeviceMemoryReport r;
    r.device_used_bytes = total_bytes - free_bytes;
    r.device_total_bytes = total_bytes;
    r.backend_bytes = allocated_bytes();
    r.cap_bytes = cap_bytes();
    return r;
  }

 private:
  absl::Status validate_exl3(const HostLinear& h, const std::string& name) const {
    const Exl3Weight& e = h.exl3;
    const bool sizes_ok = e.k > 0 && e.k % 128 == 0 && e.n > 0 && e.n % 128 == 0 && e.bits >= 1 && e.bits <= 8 &&
                          h.in_features <= e.k && h.out_features <= e.n;
    const bool trellis_ok = e.trellis.defined() && e.trellis.on_host() && e.trellis.dtype() == DType::kI16 &&
                            e.trellis.shape() == Shape({e.k / 16, e.n / 16, 16 * e.bits});
    const bool scales_ok = e.suh.defined() && e.suh.on_host() && e.suh.dtype() == DType::kF16 && e.suh.numel() == e.k &&
                           e.svh.defined() && e.svh.on_host() && e.svh.dtype() == DType::kF16 && e.svh.numel() == e.n;
    if (sizes_ok && trellis_ok && scales_ok) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": EXL3 linear k=", e.k, " n=", e.n, " bits=", e.bits, " for ", h.in_features, " -> ", h.out_features,
        " features with trellis ", e.trellis.defined() ? dtype_name(e.trellis.dtype()) : "none",
        shape_string(e.trellis.shape()), ", suh ", shape_string(e.suh.shape()), ", svh ", shape_string(e.svh.shape()),
        " (needs k, n multiples of 128, bits 1..8, host I16 trellis [k/16, n/16, ",
        "16*bits], host F16 suh [k] and svh [n])"));
  }

  // A host tensor placed on the device as `dtype`: copied when the dtypes agree, otherwise
  // converted on the device chunk by chunk (F32/F16/BF16 only). An F16 result is checked for
  // values that did not fit (±inf after rounding) or were not finite, and refused by name.
  absl::StatusOr<Tensor> to_device(const Tensor& host, DType dtype, const std::string& name) {
    if (!host.defined() || !host.on_host()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not a host tensor"));
    }
    if (host.dtype() != dtype && !(is_float_dtype(host.dtype()) && is_float_dtype(dtype))) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": cannot convert ", dtype_name(host.dtype()), " to ", dtype_name(dtype)));
    }
    EXL3_ASSIGN_OR_RETURN(Tensor dst, allocate(dtype, host.shape(), name));
    if (host.dtype() == dtype) {
      upload(host, dst);
    } else {
      const size_t in_size = dtype_size(host.dtype()), out_size = dtype_size(dtype);
      const int64_t n = host.numel();
      const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n, kConvertChunkBytes / in_size));
      EXL3_ASSIGN_OR_RETURN(
          std::shared_ptr<void> buffer,
          allocator_.allocate(static_cast<uint64_t>(chunk) * in_size, absl::StrCat("conversion buffer for ", name)));
      const auto* src = static_cast<const uint8_t*>(host.raw());
      auto* out = static_cast<uint8_t*>(dst.mutable_raw());
      for (int64_t begin = 0; begin < n; begin += chunk) {
        const int64_t count = std::min(chunk, n - begin);
        stager_->stage(src + begin * in_size, buffer.get(), static_cast<size_t>(count) * in_size);
        ConvertParams p;
        p.in = buffer.get();
        p.in_dtype = host.dtype();
        p.out = out + begin * out_size;
        p.out_dtype = dtype;
        p.n = count;
        launch_convert(p, stream_);
      }
      // The buffer is freed on return: let the conversions finish first.
      EXL3_RETURN_IF_ERROR(synchronize());
    }
    if (dtype == DType::kF16) EXL3_RETURN_IF_ERROR(check_f16_range(dst, host, name));
    return dst;
  }

  absl::Status check_f16_range(const Tensor& dst, const Tensor& host, const std::string& name) {
    auto* result = static_cast<unsigned long long*>(check_result_.get());
    CountNonfiniteParams p;
    p.x = ptr<__half>(dst);
    p.n = dst.numel();
    p.result = result;
    launch_count_nonfinite(p, stream_);
    unsigned long long counts[2] = {0, 0};
    EXL3_CUDA_CHECK(cudaMemcpyAsync(counts, result, sizeof(counts), cudaMemcpyDeviceToHost, stream_));
    EXL3_RETURN_IF_ERROR(synchronize());
    if (counts[0] == 0) return absl::OkStatus();
    const int64_t first = static_cast<int64_t>(counts[1]);
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ", counts[0], " of ", dst.numel(), " values do not fit F16 (beyond ±65504, or not finite); the ",
        "first is element ", first, " = ", host_value(host, first), " (", dtype_name(host.dtype()), ")"));
  }

  int device_;
  std::string description_;
  DeviceAllocator allocator_;
  size_t workspace_bytes_;
  Int8Activations int8_activations_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::shared_ptr<void> workspace_;
  std::shared_ptr<void> check_result_;  // 2 × u64 for check_f16_range

  std::unique_ptr<UploadStager> stager_;

  std::shared_ptr<void> scratch_a_, scratch_c_;  // F16 and F32 [scratch_rows_, scratch_features_]
  int64_t scratch_rows_ = 0, scratch_features_ = 0;
  // Uses of the linear scratch so far (linear_context, reserve_scratch): a NormHandoff or
  // InputHandoff records the count when prepared and is taken only if it is unchanged.
  uint64_t linear_scratch_uses_ = 0;
  std::shared_ptr<void> attention_scratch_;
  int64_t attention_scratch_floats_ = 0;
  uint64_t host_table_bytes_ = 0;  // pinned host tables (prepare_host_table)
  std::shared_ptr<void> dequant_staging_;  // kDequantChunkBytes of decoded Wq rows (long prefills)

  // reserve_sampling: DeviceSampleRow [sample_rows_], I32 [sample_history_], launch_sample scratch.
  std::shared_ptr<void> sample_params_, sample_history_buffer_, sample_scratch_;
  int64_t sample_rows_ = 0, sample_history_ = 0;
  uint64_t sample_scratch_bytes_ = 0;
  std::vector<DeviceSampleRow> host_rows_;  // host side of a sample()'s uploads, reused
  std::vector<int32_t> host_history_;
};

CudaBackend& as_cuda(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  EXL3_CHECK(cuda != nullptr, backend.description(), " is not a CUDA backend");
  return *cuda;
}

}  // namespace

absl::Status check_cuda_device(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", cudaGetErrorName(err), ", ",
                                                      cudaGetErrorString(err)));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " does not exist (", count, " visible)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  EXL3_RETURN_IF_ERROR(check_cuda_device(options.device));
  const std::string device_label = absl::StrCat("cuda:", options.device);
  EXL3_RETURN_IF_ERROR(cuda_status(cudaSetDevice(options.device), device_label, "cudaSetDevice"));
  cudaDeviceProp prop{};
  EXL3_RETURN_IF_ERROR(
      cuda_status(cudaGetDeviceProperties(&prop, options.device), device_label, "cudaGetDeviceProperties"));
  auto backend = std::make_unique<CudaBackend>(options, options.label.empty() ? device_label : options.label,
                                               absl::StrCat(device_label, " ", prop.name));
  EXL3_RETURN_IF_ERROR(backend->init());
  return std::unique_ptr<Backend>(std::move(backend));
}

cudaStream_t cuda_stream_of(Backend& backend) { return as_cuda(backend).stream(); }

DeviceMemoryReport device_memory_report(Backend& backend) { return as_cuda(backend).memory_report(); }

std::string DeviceMemoryReport::to_string() const {
  return absl::StrCat("device ", describe_bytes(device_used_bytes), " used of ", describe_bytes(device_total_bytes),
                      "; backend ", describe_bytes(backend_bytes), " allocated, cap ",
                      cap_bytes == 0 ? std::string("none") : describe_bytes(cap_bytes));
}

}  // namespace exl3
