// Building the synthetic model's tensor plan (see model_plan.h).
//
// Magnitudes, so activations stay O(1) through any depth: an EXL3 linear computes
// y = ((x * su) H) Wq H * sv with orthonormal 128-point Hadamards H and Wq entries that are
// codebook values of RMS r (MUL1 1.0003, MCG 1.2441, 3INST 1.2437 over uniformly random
// states; exl3-format.md §5). For random Wq, E[y_j^2] = |x * su|^2 r^2 sv_j^2, so with
// |su| of RMS 1/(r sqrt(k)) and |sv| of RMS 1 every output has the RMS of the input's elements.
// RMSNorm feeds each linear inputs of RMS 1, so q/k/v/gate/up/o/down outputs have RMS about 1
// (o and down a bit less: attention averages values, silu(g)*u has RMS about 0.6); the residual
// stream grows like sqrt(layers), finite at 80 layers, and the logits come out with RMS about 1.
#include "bench/model_plan.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/mixed_bits.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

constexpr uint16_t kBf16One = 0x3F80;
constexpr double kEmbeddingStd = 0.02;
constexpr double kBiasStd = 0.02;

PlannedModule module(std::string key) {
  PlannedModule m;
  m.key = std::move(key);
  return m;
}

int64_t pad128(int64_t v) { return (v + 127) / 128 * 128; }

double codebook_rms(const std::string& codebook) {
  if (codebook == "mul1") return 1.000312;
  if (codebook == "mcg") return 1.244112;
  return 1.243711;  // 3inst
}

class PlanBuilder {
 public:
  explicit PlanBuilder(ModelPlan& plan) : plan_(plan) {}

  StreamTensor tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, FillSpec fill) {
    fill.stream = next_stream_++;
    return StreamTensor{name, dtype, std::move(shape), std::move(fill)};
  }

  // The tensors of one linear (EXL3, or dense fp16 when bits == 16), appended to `module`.
  void add_linear(PlannedModule& module, const PlannedLinear& lin, bool bias) {
    const int64_t k = pad128(lin.in_features), n = pad128(lin.out_features);
    const std::string& p = lin.prefix;
    if (lin.bits == 16) {
      const double w_std = 1.0 / std::sqrt(static_cast<double>(lin.in_features));
      module.tensors.push_back(tensor(p + ".weight", DType::kF16, {n, lin.in_features},
                                      table16_fill(gaussian_table16(w_std, false))));
    } else {
      module.tensors.push_back(tensor(p + ".trellis", DType::kI16, {k / 16, n / 16, 16 * lin.bits}, random_bits_fill()));
      const double su = 1.0 / (codebook_rms(lin.codebook) * std::sqrt(static_cast<double>(lin.in_features)));
      module.tensors.push_back(tensor(p + ".suh", DType::kF16, {k}, signed_scales_fill(su, lin.in_features)));
      module.tensors.push_back(tensor(p + ".svh", DType::kF16, {n}, signed_scales_fill(1.0, lin.out_features)));
      if (lin.codebook == "mcg" || lin.codebook == "mul1") {
        const int32_t marker = lin.codebook == "mcg" ? kMcgMarkerValue : kMul1MarkerValue;
        module.tensors.push_back(tensor(p + "." + lin.codebook, DType::kI32, {}, int32_fill(marker)));
      }
    }
    if (bias) {
      if (!bias_table_) bias_table_ = gaussian_table16(kBiasStd, false);
      module.tensors.push_back(tensor(p + ".bias", DType::kF16, {n}, table16_fill(bias_table_)));
    }
    plan_.linears.push_back(lin);
  }

  StreamTensor norm(const std::string& name, int64_t size) {
    return tensor(name, DType::kBF16, {size}, constant16_fill(kBf16One));
  }

 private:
  ModelPlan& plan_;
  uint64_t next_stream_ = 0;
  std::shared_ptr<const std::vector<uint16_t>> bias_table_;
};

absl::Status check_options(const ModelPlanOptions& o) {
  if (find_model_shape(o.shape) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--shape: unknown shape \"", o.shape, "\" (known: ",
                                                   absl::StrJoin(model_shape_names(), ", "), ")"));
  }
  if (!(o.bpw >= 1.0 && o.bpw <= 8.0)) {
    return absl::InvalidArgumentError(absl::StrCat("--bpw: ", o.bpw, " is outside 1..8 (EXL3 stores K = 1..8 bits per weight)"));
  }
  if (!((o.head_bits >= 1 && o.head_bits <= 8) || o.head_bits == 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--head-bits: ", o.head_bits, " is not 1..8 (EXL3 head) or 16 (fp16 lm_head.weight)"));
  }
  if (o.codebook != "mul1" && o.codebook != "mcg" && o.codebook != "3inst" && o.codebook != "mixed") {
    return absl::InvalidArgumentError(absl::StrCat("--codebook: \"", o.codebook, "\" is not mul1, mcg, 3inst or mixed"));
  }
  if (o.layers < 0) return absl::InvalidArgumentError(absl::StrCat("--layers: ", o.layers, " must be >= 1"));
  return absl::OkStatus();
}

}  // namespace

uint64_t PlannedModule::bytes() const {
  uint64_t n = 0;
  for (const StreamTensor& t : tensors) n += t.nbytes();
  return n;
}

uint64_t ModelPlan::total_bytes() const {
  uint64_t n = 0;
  for (const PlannedModule& m : modules) n += m.bytes();
  return n;
}

absl::StatusOr<ModelPlan> plan_model(const ModelPlanOptions& o) {
  EXL3_RETURN_IF_ERROR(check_options(o));
  ModelPlan plan;
  plan.shape = *find_model_shape(o.shape);
  const ModelShape& s = plan.shape;
  plan.num_layers = o.layers > 0 ? o.layers : s.num_layers;

  // Bit widths and codebooks of the decoder linears, in model order.
  struct LinearShape {
    const char* name;
    int64_t in, out;
    bool bias;
  };
  const int64_t q_out = s.num_heads * s.head_dim, kv_out = s.num_kv_heads * s.head_dim;
  const std::vector<LinearShape> layer_linears = {
      {"self_attn.q_proj", s.hidden_size, q_out, s.qkv_bias},
      {"self_attn.k_proj", s.hidden_size, kv_out, s.qkv_bias},
      {"self_attn.v_proj", s.hidden_size, kv_out, s.qkv_bias},
      {"self_attn.o_proj", q_out, s.hidden_size, false},
      {"mlp.gate_proj", s.hidden_size, s.intermediate_size, false},
      {"mlp.up_proj", s.hidden_size, s.intermediate_size, false},
      {"mlp.down_proj", s.intermediate_size, s.hidden_size, false},
  };
  std::vector<uint64_t> weights;
  for (int64_t l = 0; l < plan.num_layers; ++l) {
    for (const LinearShape& ls : layer_linears) weights.push_back(static_cast<uint64_t>(pad128(ls.in) * pad128(ls.out)));
  }
  const std::vector<int> bits = assign_mixed_bits(weights, o.bpw, o.seed);
  plan.decoder_bits = mean_bits(weights, bits);
  const char* kCodebooks[3] = {"mul1", "mcg", "3inst"};
  size_t linear_index = 0;
  auto codebook_of = [&]() -> std::string {
    return o.codebook == "mixed" ? kCodebooks[(linear_index + o.seed) % 3] : o.codebook;
  };

  PlanBuilder b(plan);
  PlannedModule embed = module("model.embed_tokens");
  embed.tensors.push_back(b.tensor("model.embed_tokens.weight", DType::kBF16, {s.vocab_size, s.hidden_size},
                                   table16_fill(gaussian_table16(kEmbeddingStd, true))));
  plan.modules.push_back(std::move(embed));

  for (int64_t l = 0; l < plan.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    PlannedModule layer = module(absl::StrCat("model.layers.", l));
    layer.tensors.push_back(b.norm(p + "input_layernorm.weight", s.hidden_size));
    layer.tensors.push_back(b.norm(p + "post_attention_layernorm.weight", s.hidden_size));
    for (const LinearShape& ls : layer_linears) {
      const PlannedLinear lin{.prefix = p + ls.name,
                              .in_features = ls.in,
                              .out_features = ls.out,
                              .bits = bits[linear_index],
                              .codebook = codebook_of(),
                              .decoder = true};
      b.add_linear(layer, lin, ls.bias);
      ++linear_index;
    }
    plan.modules.push_back(std::move(layer));
  }

  PlannedModule final_norm = module("model.norm");
  final_norm.tensors.push_back(b.norm("model.norm.weight", s.hidden_size));
  plan.modules.push_back(std::move(final_norm));

  PlannedModule head = module("lm_head");
  b.add_linear(head,
               {.prefix = "lm_head",
                .in_features = s.hidden_size,
                .out_features = s.vocab_size,
                .bits = o.head_bits,
                .codebook = o.head_bits == 16 ? std::string() : codebook_of(),
                .decoder = false},
               false);
  plan.modules.push_back(std::move(head));
  return plan;
}

}  // namespace exl3
