// Llama-family forward pass and weight loading.
#include "worker/model/llama_model.h"

#include "absl/strings/str_cat.h"

namespace exl3 {
namespace {

absl::StatusOr<Tensor> load_vector(const SafetensorsCollection& t, const std::string& name, int64_t size,
                                   uint64_t& bytes) {
  EXL3_ASSIGN_OR_RETURN(Tensor w, t.get(name));
  if (w.dtype() != DType::kF16 && w.dtype() != DType::kBF16 && w.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(t.file_of(name), ": tensor \"", name, "\" has dtype ",
                                                   dtype_name(w.dtype()), ", expected F16, BF16 or F32"));
  }
  if (w.shape() != Shape{size}) {
    return absl::InvalidArgumentError(absl::StrCat(t.file_of(name), ": tensor \"", name, "\" has shape ",
                                                   shape_string(w.shape()), ", expected [", size, "]"));
  }
  bytes += w.nbytes();
  return w.to_f32();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& model_dir,
                                                             const LoadProgress& progress) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  EXL3_ASSIGN_OR_RETURN(model->config_, load_model_config(model_dir));
  model->rope_ = compute_rope(model->config_);
  EXL3_ASSIGN_OR_RETURN(SafetensorsCollection tensors, SafetensorsCollection::open_dir(model_dir));
  EXL3_RETURN_IF_ERROR(model->load_weights(tensors, progress));
  return model;
}

absl::Status LlamaModel::load_weights(const SafetensorsCollection& t, const LoadProgress& progress) {
  const ModelConfig& c = config_;
  const int64_t total = c.num_layers + 2;
  uint64_t bytes = 0;

  const std::string embed_name = "model.embed_tokens.weight";
  {
    EXL3_ASSIGN_OR_RETURN(Tensor e, t.get(embed_name));
    if (e.rank() != 2 || e.dim(0) != c.vocab_size || e.dim(1) != c.hidden_size ||
        (e.dtype() != DType::kF16 && e.dtype() != DType::kBF16 && e.dtype() != DType::kF32)) {
      return absl::InvalidArgumentError(absl::StrCat(t.file_of(embed_name), ": tensor \"", embed_name, "\" is ",
                                                     dtype_name(e.dtype()), " ", shape_string(e.shape()),
                                                     ", expected F16/BF16/F32 [", c.vocab_size, ", ", c.hidden_size, "]"));
    }
    bytes += e.nbytes();
    embedding_ = e.to_f32();
  }
  if (progress) progress(1, total);

  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  double bits_weighted = 0.0, weights = 0.0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    DecoderLayer layer;
    EXL3_ASSIGN_OR_RETURN(layer.input_norm, load_vector(t, p + "input_layernorm.weight", c.hidden_size, bytes));
    EXL3_ASSIGN_OR_RETURN(layer.post_norm, load_vector(t, p + "post_attention_layernorm.weight", c.hidden_size, bytes));
    if (c.qk_norm) {
      EXL3_ASSIGN_OR_RETURN(layer.q_norm, load_vector(t, p + "self_attn.q_norm.weight", c.head_dim, bytes));
      EXL3_ASSIGN_OR_RETURN(layer.k_norm, load_vector(t, p + "self_attn.k_norm.weight", c.head_dim, bytes));
    }
    struct Spec {
      Linear* dst;
      const char* name;
      int64_t in, out;
    };
    const Spec specs[] = {
        {&layer.q, "self_attn.q_proj", c.hidden_size, q_dim},   {&layer.k, "self_attn.k_proj", c.hidden_size, kv_dim},
        {&layer.v, "self_attn.v_proj", c.hidden_size, kv_dim},  {&layer.o, "self_attn.o_proj", q_dim, c.hidden_size},
        {&layer.gate, "mlp.gate_proj", c.hidden_size, c.intermediate_size},
        {&layer.up, "mlp.up_proj", c.hidden_size, c.intermediate_size},
        {&layer.down, "mlp.down_proj", c.intermediate_size, c.hidden_size},
    };
    for (const Spec& s : specs) {
      if (t.has(p + s.name + ".slice.0.trellis")) {
        return absl::UnimplementedError(absl::StrCat("\"", p, s.name, "\" is stored in MLP slices (intermediate_size > 55296), not supported yet"));
      }
      EXL3_ASSIGN_OR_RETURN(*s.dst, Linear::load(t, p + s.name, s.in, s.out));
      bytes += s.dst->info().stored_bytes;
      if (s.dst->info().exl3) {
        bits_weighted += static_cast<double>(s.dst->info().bits) * s.in * s.out;
        weights += static_cast<double>(s.in) * s.out;
      }
    }
    layers_.push_back(std::move(layer));
    if (progress) progress(i + 2, total);
  }
  decoder_bpw_ = weights > 0 ? bits_weighted / weights : 0.0;

  EXL3_ASSIGN_OR_RETURN(final_norm_, load_vector(t, "model.norm.weight", c.hidden_size, bytes));
  if (t.has("lm_head.trellis") || t.has("lm_head.weight")) {
    EXL3_ASSIGN_OR_RETURN(lm_head_, Linear::load(t, "lm_head", c.hidden_size, c.vocab_size));
    bytes += lm_head_.info().stored_bytes;
  } else if (c.tie_word_embeddings) {
    EXL3_ASSIGN_OR_RETURN(lm_head_, Linear::load_dense(t, embed_name, c.hidden_size, c.vocab_size));
  } else {
    return absl::NotFoundError("missing tensor \"lm_head.weight\" (tie_word_embeddings is false)");
  }
  if (progress) progress(total, total);
  stored_bytes_ = bytes;
  return absl::OkStatus();
}

KvCacheShape LlamaModel::cache_shape(int64_t num_pages, int64_t page_size) const {
  return KvCacheShape{config_.num_layers, config_.num_kv_heads, config_.head_dim, num_pages, page_size};
}

Tensor LlamaModel::forward(std::span<const int32_t> ids, int32_t start_pos, KvCache& cache, const PageTable& pages,
                           LogitsMode mode) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(ids.size());
  EXL3_CHECK(n > 0, "forward needs at least one token");
  EXL3_CHECK(pages.capacity(cache.shape().page_size) >= start_pos + n, "page table holds ",
             pages.capacity(cache.shape().page_size), " positions, need ", start_pos + n);
  std::vector<int32_t> positions(n);
  for (int64_t i = 0; i < n; ++i) positions[i] = start_pos + static_cast<int32_t>(i);

  Tensor x = embedding_ref(embedding_, ids);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DecoderLayer& layer = layers_[l];
    PagedKv& kv = cache.layer(l);

    Tensor h = rms_norm_ref(x, layer.input_norm, static_cast<float>(c.rms_norm_eps));
    Tensor q = layer.q.forward(h).reshape({n, c.num_heads, c.head_dim});
    Tensor k = layer.k.forward(h).reshape({n, c.num_kv_heads, c.head_dim});
    Tensor v = layer.v.forward(h).reshape({n, c.num_kv_heads, c.head_dim});
    if (c.qk_norm) {
      q = rms_norm_ref(q, layer.q_norm, static_cast<float>(c.rms_norm_eps));
      k = rms_norm_ref(k, layer.k_norm, static_cast<float>(c.rms_norm_eps));
    }
    rope_ref(q, positions, rope_.inv_freq, rope_.attention_scaling);
    rope_ref(k, positions, rope_.inv_freq, rope_.attention_scaling);
    kv_write_ref(kv, pages.pages, positions, k, v);
    Tensor a = attention(q, kv, pages.pages, positions).reshape({n, c.num_heads * c.head_dim});
    add_inplace_ref(x, layer.o.forward(a));

    h = rms_norm_ref(x, layer.post_norm, static_cast<float>(c.rms_norm_eps));
    Tensor m = silu_mul_ref(layer.gate.forward(h), layer.up.forward(h));
    add_inplace_ref(x, layer.down.forward(m));
  }
  if (mode == LogitsMode::kLast) {
    Tensor last = Tensor::zeros(DType::kF32, {1, c.hidden_size});
    std::copy_n(x.data<float>() + (n - 1) * c.hidden_size, c.hidden_size, last.mutable_data<float>());
    x = last;
  }
  x = rms_norm_ref(x, final_norm_, static_cast<float>(c.rms_norm_eps));
  return lm_head_.forward(x);
}

}  // namespace exl3
