// Backend: the seam between the model (written once, worker/model/) and the device a rank computes
// on. A backend owns the rank's device memory (every allocation is counted against a hard cap),
// turns host weights into its own resident form, and runs the ops of one forward pass on buffers
// the caller allocated from it. The CPU backend (kernels/cpu/) and the CUDA backend
// (kernels/cuda/) are peers; kernels/ref/ is the specification both are tested against.
// docs/backend.md describes the design.
//
// Conventions of every op below:
//   - all tensors are row-major, contiguous, on this backend's device (device() == t.device());
//   - "A" is activation_dtype(): F32 on the CPU backend, F16 on the CUDA backend;
//   - outputs are preallocated by the caller (normally views of a workspace arena); nothing is
//     allocated inside an op, and ops never synchronise with the host (CUDA: all work is queued
//     on the backend's one stream, in call order);
//   - a broken contract (shape, dtype, device) is a bug in the caller: EXL3_CHECK aborts.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/int8_activations.h"
#include "kernels/ops.h"
#include "kernels/sampling.h"
#include "kernels/tensor.h"

namespace exl3 {

// A linear as loaded from disk, in host memory: exactly one of `exl3` (a held slice: trellis,
// suh, svh with k, n multiples of 128) or `dense` (HF layout [out, in], F16/BF16/F32) is set.
struct HostLinear {
  int64_t in_features = 0;   // logical (unpadded) sizes of the held slice
  int64_t out_features = 0;
  bool is_exl3 = false;
  Exl3Weight exl3;           // host tensors; exl3.k >= in_features, exl3.n >= out_features
  Tensor dense;              // host [out_features, in_features]
  Tensor bias;               // host F32 [out_features], or undefined
};

// A linear resident on a backend. The layout of `dense` is the backend's own business (CPU: F32
// [in, out]; CUDA: F16 [out, in]); the model only passes LinearWeights back to linear().
struct LinearWeights {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool is_exl3 = false;
  Exl3Weight exl3;           // device tensors when the backend keeps the trellis
  Tensor dense;
  Tensor bias;               // F32 [out_features] on the device, or undefined
  // CPU backend with int8 activations on, for the EXL3 linears they may apply to: the inner weight
  // Wq as F32 [exl3.k, exl3.n] in place of `dense` (exl3 then holds k, n, bits, codebook, suh and
  // svh, no trellis).
  Tensor inner;
  uint64_t bytes = 0;        // device bytes this linear holds
};

// What one forward step runs, on the backend's device; every tensor is I32.
//   tokens [n], positions [n]: token ids and their positions in their sequences;
//   token_seq [n]: index (0..num_seqs-1) of each token's sequence in the batch;
//   page_table [num_seqs, max_pages]: physical KV page of each logical page of each sequence
//     (rows padded with 0 past a sequence's pages);
//   logit_rows [r]: rows of the hidden state that go through the head.
// A token at position p of sequence s attends to positions 0..p of s, whose keys and values live
// at page_table[s][q / page_size], slot q % page_size.
struct StepMeta {
  Tensor tokens, positions, token_seq, page_table, logit_rows;
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_pages = 0;
  int64_t num_logit_rows = 0;
  int32_t max_position = 0;  // largest position in the batch (host-side knowledge)
};

// One logits row to sample: the request's parameters, the Philox position of the draw (the
// position of the token being sampled) and the sequence's token history for the penalties.
// The spans point into host memory the caller keeps alive until sample() returns.
struct SampleRow {
  SamplingParams params;                 // validated (validate_sampling_params)
  int64_t position = 0;                  // >= 0
  std::span<const int32_t> prompt_ids;   // ids in [0, vocab)
  std::span<const int32_t> output_ids;   // ids in [0, vocab)
};
// Floats per row of SampleBatch::logprobs: the sampled token's logprob, then kMaxLogprobs
// (id, logprob) pairs.
inline constexpr int64_t kLogprobWidth = 1 + 2 * static_cast<int64_t>(kMaxLogprobs);

// One row of SampleBatch::logprobs (kLogprobWidth floats) written from / read into TokenLogprobs;
// reading takes the first `n` alternatives.
inline void write_logprob_row(const TokenLogprobs& lp, float* row) {
  row[0] = lp.logprob;
  for (size_t j = 0; j < lp.top.size(); ++j) {
    row[1 + 2 * j] = static_cast<float>(lp.top[j].id);
    row[2 + 2 * j] = lp.top[j].logprob;
  }
}
inline TokenLogprobs read_logprob_row(const float* row, int32_t n) {
  TokenLogprobs lp;
  lp.logprob = row[0];
  for (int32_t j = 0; j < n; ++j) lp.top.push_back({static_cast<int32_t>(row[1 + 2 * j]), row[2 + 2 * j]});
  return lp;
}

struct SampleBatch {
  std::vector<SampleRow> rows;  // one per logits row, in row order
  // Where rows with params.logprobs > 0 report token_logprobs_ref (kernels/sampling.h) of their
  // sampled token, or null when no row asks: F32 [rows, kLogprobWidth] on the backend's device.
  // Row i: [0] the logprob of out[i]; for j < params.logprobs, [1 + 2j] the j-th best id (an
  // exact float: vocab < 2^24) and [2 + 2j] its logprob. Everything else is left untouched.
  Tensor* logprobs = nullptr;

  // Words of per-row data sample() may upload, at most what reserve_sampling reserved as history
  // tokens: the prompt and output ids of rows with a penalty on (a row whose penalties are all off
  // needs none of its history on the device), plus 3 per sparse bias entry a row may carry
  // (logit bias, bans and DRY penalties: see bias_bound).
  int64_t history_tokens() const {
    int64_t total = 0;
    for (const SampleRow& r : rows) {
      if (reads_history(r.params)) total += static_cast<int64_t>(r.prompt_ids.size() + r.output_ids.size());
      total += 3 * bias_bound(r);
    }
    return total;
  }
  // Whether any penalty is on (with all off, the history changes no logit on the device).
  static bool reads_history(const SamplingParams& p) {
    return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  }
  // Most sparse bias entries of a row: its logit biases and bans, and one DRY penalty per token of
  // the history DRY looks at.
  static int64_t bias_bound(const SampleRow& r) {
    int64_t dry = 0;
    if (r.params.dry_multiplier != 0.0f) {
      dry = static_cast<int64_t>(r.prompt_ids.size() + r.output_ids.size());
      if (r.params.dry_range > 0) dry = std::min<int64_t>(dry, r.params.dry_range);
    }
    return static_cast<int64_t>(r.params.logit_bias.size() + r.params.banned_ids.size()) + dry;
  }
};

// What linear_add hands to the norm op that reads the residual next (norm_linears,
// norm_gate_up_silu or norm_qkv_rope_kv_write, given the same NormHandoff): the caller names that
// norm (weight, eps) and the linears that read it. A backend whose linear_add did the norm's work
// in its own pass (CUDA, 2-64 rows: the RMSNorm of the new residual and the linears' input
// transforms in the matmul's output pass) sets `prepared`; the norm op then uses that work and
// clears it. The work lives in the backend's scratch: an op run in between that may overwrite it
// voids it, and the norm op then computes without it. Backends that never prepare (CPU) leave it
// unset, and every op computes what it computes without it.
struct NormHandoff {
  const Tensor* norm_weight = nullptr;
  float eps = 0.0f;
  std::array<const LinearWeights*, 3> linears{};
  int count = 0;
  // Set by the backend: the residual (its data) the work was done for, its rows, and the
  // backend's own record of each linear's prepared input and of when it was prepared.
  bool prepared = false;
  const void* residual = nullptr;
  int64_t rows = 0;
  std::array<const void*, 3> inputs{};
  uint64_t scratch_uses = 0;
};

// What gate_up_silu / norm_gate_up_silu hand to the linear that reads their act next (the MLP's
// down projection, through linear_add, given the same InputHandoff): the caller names that linear.
// A backend whose gated product's pass also did that linear's input transform (CUDA, 2-4 rows with
// int8 activations: act ⊙ suh, Hadamard, quantized as its int8 matmul takes it) sets `prepared`;
// linear_add then uses that work and clears it; as with NormHandoff, an op in between that may
// overwrite the backend's scratch voids it. act is written either way. Backends that never prepare
// (CPU) leave it unset.
struct InputHandoff {
  const LinearWeights* linear = nullptr;
  // Set by the backend: act (its data) the work was done for, its rows, and the backend's own
  // record of the prepared input and of when it was prepared.
  bool prepared = false;
  const void* input = nullptr;
  int64_t rows = 0;
  const void* staged = nullptr;
  uint64_t scratch_uses = 0;
};

// Device work recorded once and replayed without per-op host launches (CUDA: a graph).
class StepGraph {
 public:
  virtual ~StepGraph() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string description() const = 0;  // e.g. "cpu (OpenBLAS)", "cuda:0 NVIDIA H200"
  virtual DType activation_dtype() const = 0;
  virtual DType kv_dtype() const = 0;            // dtype of the KV cache pages

  // ---- Memory ---------------------------------------------------------------------------------
  // A zero-filled tensor on the device. RESOURCE_EXHAUSTED when it would take the backend past its
  // cap, naming `what`, the size and by how much the cap is short.
  virtual absl::StatusOr<Tensor> allocate(DType dtype, const Shape& shape, const std::string& what) = 0;
  virtual uint64_t allocated_bytes() const = 0;  // live allocations through allocate()
  virtual uint64_t cap_bytes() const = 0;        // 0 = no cap
  // Host -> device, same dtype and element count. The host tensor may be freed after the call.
  virtual void upload(const Tensor& host, Tensor& dst) = 0;
  // Device -> host, same dtype and element count; waits for all queued work first.
  virtual void download(const Tensor& src, Tensor& host) = 0;
  // Waits for all queued work; a device fault is returned as INTERNAL.
  virtual absl::Status synchronize() = 0;

  // ---- Weights (at load) ---------------------------------------------------------------------
  // The backend's resident form of a linear (CPU: dequantized F32; CUDA: the trellis kept).
  virtual absl::StatusOr<LinearWeights> prepare_linear(const HostLinear& host, const std::string& name) = 0;
  // A host tensor converted to `dtype` (F32/F16/BF16 from F32/F16/BF16) and placed on the device.
  virtual absl::StatusOr<Tensor> prepare_tensor(const Tensor& host, DType dtype, const std::string& name) = 0;
  // A read-mostly table of which a step needs only a few rows (the embedding), in `dtype` (as
  // prepare_tensor). CUDA: pinned, device-mapped host memory that kernels read in place over PCIe
  // (a 70B's 2 GB embedding then costs no device memory on any rank; ExLlamaV3 does the same);
  // the tensor is tagged kCuda (device-addressable) and is not counted in allocated_bytes().
  // CPU: an ordinary tensor.
  virtual absl::StatusOr<Tensor> prepare_host_table(const Tensor& host, DType dtype, const std::string& name) = 0;
  // Bytes held by prepare_host_table tables (host memory).
  virtual uint64_t host_table_bytes() const = 0;
  // Reserves one block for the long-lived allocations that follow (weights, KV cache), sized by the
  // plan, so that they cost their exact bytes rather than the allocator's granularity each (CUDA:
  // 2 MiB per cudaMalloc). Later allocations are carved from it while it has room. CPU: no-op.
  virtual absl::Status reserve_pool(uint64_t bytes) = 0;
  // Scratch the backend's ops may need, sized once for the largest step: up to `max_rows` rows
  // through linears of at most `max_features` padded inputs or outputs.
  virtual absl::Status reserve_scratch(int64_t max_rows, int64_t max_features) = 0;
  // Buffers sample() needs, sized once: up to `max_rows` rows of `vocab` logits whose histories
  // total at most `max_history_tokens` (SampleBatch::history_tokens). Keeps the larger of the old
  // and new sizes; call it outside a step (it may synchronise). CPU: no-op.
  virtual absl::Status reserve_sampling(int64_t max_rows, int64_t vocab, int64_t max_history_tokens) = 0;

  // ---- Ops of one forward pass -----------------------------------------------------------------
  // t = 0 (all bytes), any dtype.
  virtual void zero(Tensor& t) = 0;
  // out[t, :] = table[ids[t], :]. table F32/F16/BF16 [vocab, d], ids I32 [n] in range (validated
  // by the caller), out F32 [n, d].
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  // out = x · rsqrt(mean(x²) + eps) · weight over rows of d = weight.numel(); x and out F32 or A
  // with numel a multiple of d; weight F32 [d]; out may alias x. Sums in fp32.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  // x += y elementwise; x F32, y F32 or A, same numel.
  virtual void add(Tensor& x, const Tensor& y) = 0;
  // y = x · W (+ bias). x A [m, in_features]; y A or F32 [m, out_features]. EXL3 per
  // exl3-format.md §3; padded inputs beyond in_features count as zero, padded outputs are dropped.
  virtual void linear(const LinearWeights& w, const Tensor& x, Tensor& y) = 0;
  // out = silu(gate) ⊙ up; all A, same shape.
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // NEOX rotary embedding in place (contract of rope_ref): x A [n, heads, head_dim], positions I32
  // [n], inv_freq F32 [rotary_dim / 2] on the device.
  virtual void rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, float attention_scaling) = 0;
  // Writes k, v (A [n, kv_heads, head_dim]) of every token into its sequence's pages of `cache`
  // (k_pages/v_pages kv_dtype() [num_pages, page_size, kv_heads, head_dim]).
  virtual void kv_write(PagedKv& cache, const Tensor& k, const Tensor& v, const StepMeta& meta) = 0;
  // Causal grouped-query attention of every token over its own sequence (contract of
  // attention_ref, batched through meta): q A [n, heads, head_dim] -> out A [n, heads, head_dim];
  // heads % kv_heads == 0, scale 1/sqrt(head_dim). kv_write of the same tokens comes first.
  virtual void attention(const Tensor& q, const PagedKv& cache, const StepMeta& meta, Tensor& out) = 0;
  // out[i, :] = x[rows[i], :]; x and out the same dtype, rows I32 [r].
  virtual void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) = 0;
  // dst[:, column : column + w] = src for src [r, w] and dst [r, cols] of the same dtype,
  // column + w <= cols (re-packs column blocks, e.g. the vocabulary slices of tensor parallel).
  virtual void copy_columns(const Tensor& src, Tensor& dst, int64_t column) = 0;

  // ---- Sampling --------------------------------------------------------------------------------
  // out[i] = the token sampled from logits row i for batch.rows[i]: logits F32 [rows, vocab]
  // (none NaN or +inf, each row with a finite value after its bans), out I32 [rows],
  // batch.rows.size() == rows. Semantics of sample_ref (kernels/sampling.h): the distribution of
  // sampling_distribution at the row's position and the inverse-CDF draw at
  // u = philox_uniform(seed, position, kSampleStream); temperature 0 is the argmax of the processed
  // logits (ties to the lowest id), exactly. Rows with params.logprobs > 0 also fill
  // batch.logprobs (which must then be set); rows without cost nothing more. CPU: fp64 like the
  // reference, equal to it. CUDA: launch_sample (kernels/cuda/sample.cuh), greedy rows exact,
  // sampled rows within fp64 rounding of the reference distribution and logprobs within fp32
  // rounding; rows, vocab and per-row data within reserve_sampling's sizes; row parameters,
  // histories and sparse biases (logit bias, bans and the DRY penalties computed here on the
  // host by dry_penalties) uploaded through the staged upload into the reserved buffers (no
  // allocation, no synchronisation).
  virtual void sample(const Tensor& logits, const SampleBatch& batch, Tensor& out) = 0;

  // ---- Fused linears ---------------------------------------------------------------------------
  // Compositions of the ops above that a backend may run in fewer passes (CUDA: one GEMV launch for
  // several linears of one input, the add or the gated activation folded into the output
  // transform). The defaults (kernels/backend.cpp) are the plain compositions; an override must give
  // the same results within the ops' own accuracy.
  // ys[i] = x · ws[i] for every i (1..3 linears of the same x).
  virtual void linears(std::span<const LinearWeights* const> ws, const Tensor& x, std::span<Tensor> ys);
  // act = silu(x · gate) ⊙ (x · up); gate_out and up_out (A [rows, out]) are scratch the
  // composition may use.
  // `next` (may be null): the linear that reads act next, whose input the backend may prepare
  // (InputHandoff).
  virtual void gate_up_silu(const LinearWeights& gate, const LinearWeights& up, const Tensor& x, Tensor& gate_out,
                            Tensor& up_out, Tensor& act, InputHandoff* next);
  // residual (F32) += x · w; out (F32, residual's shape) is scratch the composition may use. With
  // `next` (may be null), the norm op that reads the residual next may find its work done
  // (NormHandoff). `input` (may be null): what the gate_up_silu before prepared for this linear's
  // x, taken and cleared (InputHandoff).
  virtual void linear_add(const LinearWeights& w, const Tensor& x, Tensor& out, Tensor& residual, NormHandoff* next,
                          InputHandoff* input);

  // h = rms_norm(x, norm_weight, eps), then linears(ws, h, ys) / gate_up_silu(gate, up, h, ...): a
  // layer's norm and the linears that read it (CUDA, for a row or two: the matmul normalizes x as it
  // stages it, with no RMSNorm launch, and h is not written). h (A [rows, dim]) is scratch.
  // `handoff` (may be null): what the linear_add before prepared for this norm, taken and cleared.
  virtual void norm_linears(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                            std::span<const LinearWeights* const> ws, std::span<Tensor> ys, NormHandoff* handoff);
  virtual void norm_gate_up_silu(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                                 const LinearWeights& gate, const LinearWeights& up, Tensor& gate_out, Tensor& up_out,
                                 Tensor& act, NormHandoff* handoff, InputHandoff* next);

  // rope(q), rope(k), then kv_write(cache, k, v, meta): a step's positional rotation and cache write
  // (CUDA: one launch).
  virtual void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& inv_freq, float attention_scaling,
                             PagedKv& cache, const StepMeta& meta);

  // norm_linears(x, norm_weight, eps, h, qkv, {q, k, v} as [rows, heads · head_dim]) then
  // rope_kv_write(q, k, v, ...): a layer's norm, its q/k/v projections, their rotation and the cache
  // write (CUDA, for up to 64 rows into a 16-bit cache of 128-wide heads rotated whole: one matmul,
  // whose output pass rotates q and k and writes the cache, and for a row or two normalizes x as
  // it stages it). q, k, v as for rope_kv_write.
  virtual void norm_qkv_rope_kv_write(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                                      std::span<const LinearWeights* const> qkv, Tensor& q, Tensor& k, Tensor& v,
                                      const Tensor& inv_freq, float attention_scaling, PagedKv& cache,
                                      const StepMeta& meta, NormHandoff* handoff);

  // ---- Step graphs ------------------------------------------------------------------------------
  // capture_step runs `record` once with this backend's stream under capture: the ops it issues
  // are recorded, not run. replay_step queues the recorded work again: the same kernels on the
  // same buffers with the same sizes (inputs may change in place between replays). `record` must
  // not synchronise, upload, download or allocate. A failed capture leaves nothing queued.
  // Backends without graphs (the CPU backend) say UNIMPLEMENTED and never call `record`.
  virtual bool supports_step_graphs() const { return false; }
  virtual absl::StatusOr<std::unique_ptr<StepGraph>> capture_step(const std::function<absl::Status()>& record);
  virtual absl::Status replay_step(StepGraph& graph);
};

// The CPU backend: fp32 activations and KV cache, EXL3 weights dequantized at load, BLAS for
// matmul and attention. cap_bytes 0 = no cap.
std::unique_ptr<Backend> make_cpu_backend(uint64_t cap_bytes = 0);

struct CpuBackendOptions {
  uint64_t cap_bytes = 0;  // 0 = no cap
  // Not kOff: the EXL3 linears int8 activations may apply to (MUL1, a width the mode allows) keep
  // their inner weight Wq (F32) and suh/svh instead of the folded W, about the same bytes. Their
  // linear() calls run x ⊙ suh, the Hadamard transforms and Wq step by step; the calls where
  // use_int8_activations(mode, bits, codebook, rows) holds quantize the transformed input as the
  // spec says (kernels/ref/int8_activations_ref.h), as the CUDA backend's few-rows kernel does.
  Int8Activations int8_activations = Int8Activations::kOff;
};
std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options);

}  // namespace exl3
