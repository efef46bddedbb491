// Defaults of the optional Backend capabilities (kernels/backend.h): fused linears as plain
// compositions of the ops, and no step graphs.
#include "kernels/backend.h"

#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace exl3 {

void Backend::linears(std::span<const LinearWeights* const> ws, const Tensor& x, std::span<Tensor> ys) {
  EXL3_CHECK(ws.size() == ys.size(), "linears: ", ws.size(), " weights for ", ys.size(), " outputs");
  for (size_t i = 0; i < ws.size(); ++i) linear(*ws[i], x, ys[i]);
}

void Backend::gate_up_silu(const LinearWeights& gate, const LinearWeights& up, const Tensor& x, Tensor& gate_out,
                           Tensor& up_out, Tensor& act, InputHandoff* next) {
  if (next != nullptr) next->prepared = false;  // the composition prepares nothing
  linear(gate, x, gate_out);
  linear(up, x, up_out);
  silu_mul(gate_out, up_out, act);
}

void Backend::linear_add(const LinearWeights& w, const Tensor& x, Tensor& out, Tensor& residual, NormHandoff* next,
                         InputHandoff* input) {
  if (next != nullptr) next->prepared = false;
  if (input != nullptr) input->prepared = false;  // x itself is read
  linear(w, x, out);
  add(residual, out);
}

void Backend::norm_linears(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                           std::span<const LinearWeights* const> ws, std::span<Tensor> ys, NormHandoff* handoff) {
  if (handoff != nullptr) handoff->prepared = false;  // the composition redoes the norm
  rms_norm(x, norm_weight, eps, h);
  linears(ws, h, ys);
}

void Backend::norm_gate_up_silu(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                                const LinearWeights& gate, const LinearWeights& up, Tensor& gate_out, Tensor& up_out,
                                Tensor& act, NormHandoff* handoff, InputHandoff* next) {
  if (handoff != nullptr) handoff->prepared = false;
  rms_norm(x, norm_weight, eps, h);
  gate_up_silu(gate, up, h, gate_out, up_out, act, next);
}

void Backend::rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, const Tensor& inv_freq, float attention_scaling,
                            PagedKv& cache, const StepMeta& meta) {
  rope(q, meta.positions, inv_freq, attention_scaling);
  rope(k, meta.positions, inv_freq, attention_scaling);
  kv_write(cache, k, v, meta);
}

void Backend::norm_qkv_rope_kv_write(const Tensor& x, const Tensor& norm_weight, float eps, Tensor& h,
                                     std::span<const LinearWeights* const> qkv, Tensor& q, Tensor& k, Tensor& v,
                                     const Tensor& inv_freq, float attention_scaling, PagedKv& cache,
                                     const StepMeta& meta, NormHandoff* handoff) {
  EXL3_CHECK(qkv.size() == 3 && q.rank() == 3 && k.rank() == 3 && v.rank() == 3,
             "norm_qkv_rope_kv_write: three linears and q, k, v of [rows, heads, head_dim]");
  Tensor ys[] = {q.reshape({q.dim(0), q.dim(1) * q.dim(2)}), k.reshape({k.dim(0), k.dim(1) * k.dim(2)}),
                 v.reshape({v.dim(0), v.dim(1) * v.dim(2)})};
  norm_linears(x, norm_weight, eps, h, qkv, ys, handoff);
  rope_kv_write(q, k, v, inv_freq, attention_scaling, cache, meta);
}

absl::StatusOr<std::unique_ptr<StepGraph>> Backend::capture_step(const std::function<absl::Status()>&) {
  return absl::UnimplementedError(absl::StrCat(description(), ": no step graphs"));
}

absl::Status Backend::replay_step(StepGraph&) {
  return absl::UnimplementedError(absl::StrCat(description(), ": no step graphs"));
}

}  // namespace exl3
