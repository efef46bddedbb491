// Llama-family weight loading (whole model or one rank's shard) and the batched forward pass.
#include "worker/model/llama_model.h"

#include "absl/strings/str_cat.h"

namespace exl3 {
namespace {

absl::StatusOr<Tensor> load_vector(const SafetensorsCollection& t, const std::string& name, int64_t size,
                                   uint64_t& stored) {
  EXL3_ASSIGN_OR_RETURN(Tensor w, t.get(name));
  if (w.dtype() != DType::kF16 && w.dtype() != DType::kBF16 && w.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(t.file_of(name), ": tensor \"", name, "\" has dtype ",
                                                   dtype_name(w.dtype()), ", expected F16, BF16 or F32"));
  }
  if (w.shape() != Shape{size}) {
    return absl::InvalidArgumentError(absl::StrCat(t.file_of(name), ": tensor \"", name, "\" has shape ",
                                                   shape_string(w.shape()), ", expected [", size, "]"));
  }
  stored += w.nbytes();
  return w.to_f32();
}

// Rows [begin, begin + count) of a [rows, ...] tensor, as a new tensor of shape [count, ...].
Tensor take_rows(const Tensor& t, int64_t begin, int64_t count) {
  Shape shape = t.shape();
  const int64_t row = t.numel() / shape[0];
  shape[0] = count;
  Tensor out = Tensor::zeros(DType::kF32, shape);
  std::copy_n(t.data<float>() + begin * row, count * row, out.mutable_data<float>());
  return out;
}

absl::Status all_reduce(Communicator* comm, Tensor& t) {
  if (comm == nullptr || comm->world_size() == 1) return absl::OkStatus();
  return comm->all_reduce_sum(std::span<float>(t.mutable_data<float>(), t.numel()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& model_dir,
                                                             const LoadProgress& progress) {
  EXL3_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(model_dir));
  return load_shard(model_dir, ModelShard::full(config), progress);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load_shard(const std::string& model_dir,
                                                                   const ModelShard& shard,
                                                                   const LoadProgress& progress) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  EXL3_ASSIGN_OR_RETURN(model->config_, load_model_config(model_dir));
  EXL3_RETURN_IF_ERROR(shard.validate(model->config_));
  model->shard_ = shard;
  model->rope_ = compute_rope(model->config_);
  EXL3_ASSIGN_OR_RETURN(SafetensorsCollection tensors, SafetensorsCollection::open_dir(model_dir));
  EXL3_RETURN_IF_ERROR(model->load_weights(tensors, progress));
  return model;
}

absl::Status LlamaModel::load_weights(const SafetensorsCollection& t, const LoadProgress& progress) {
  const ModelConfig& c = config_;
  const ModelShard& s = shard_;
  const int64_t total = (s.end_layer - s.first_layer) + 2;
  uint64_t stored = 0, allocated = 0;

  const std::string embed_name = "model.embed_tokens.weight";
  if (s.has_embedding) {
    EXL3_ASSIGN_OR_RETURN(Tensor e, t.get(embed_name));
    if (e.rank() != 2 || e.dim(0) != c.vocab_size || e.dim(1) != c.hidden_size ||
        (e.dtype() != DType::kF16 && e.dtype() != DType::kBF16 && e.dtype() != DType::kF32)) {
      return absl::InvalidArgumentError(absl::StrCat(t.file_of(embed_name), ": tensor \"", embed_name, "\" is ",
                                                     dtype_name(e.dtype()), " ", shape_string(e.shape()),
                                                     ", expected F16/BF16/F32 [", c.vocab_size, ", ", c.hidden_size, "]"));
    }
    stored += e.nbytes();
    embedding_ = e.to_f32();
    allocated += embedding_.nbytes();
  }
  if (progress) progress(1, total);

  const int64_t group = c.num_heads / c.num_kv_heads, hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd;
  double bits_weighted = 0.0, weights = 0.0;
  for (int64_t i = s.first_layer; i < s.end_layer; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const LayerSlice& sl = s.slice(i);
    DecoderLayer layer;
    EXL3_ASSIGN_OR_RETURN(layer.input_norm, load_vector(t, p + "input_layernorm.weight", c.hidden_size, stored));
    EXL3_ASSIGN_OR_RETURN(layer.post_norm, load_vector(t, p + "post_attention_layernorm.weight", c.hidden_size, stored));
    layer.kv_heads = sl.kv_head_end - sl.kv_head_begin;
    layer.heads = layer.kv_heads * group;
    if (c.qk_norm && layer.heads > 0) {
      EXL3_ASSIGN_OR_RETURN(layer.q_norm, load_vector(t, p + "self_attn.q_norm.weight", hd, stored));
      EXL3_ASSIGN_OR_RETURN(layer.k_norm, load_vector(t, p + "self_attn.k_norm.weight", hd, stored));
    }
    allocated += layer.input_norm.nbytes() + layer.post_norm.nbytes() + layer.q_norm.nbytes() * 2;
    struct Spec {
      Linear* dst;
      const char* name;
      int64_t in, out;
      LinearSlice slice;
      bool held;
    };
    const int64_t qb = sl.kv_head_begin * group * hd, qe = sl.kv_head_end * group * hd;
    const int64_t kb = sl.kv_head_begin * hd, ke = sl.kv_head_end * hd;
    const bool attn = layer.heads > 0, mlp = sl.mlp_end > sl.mlp_begin;
    const Spec specs[] = {
        {&layer.q, "self_attn.q_proj", c.hidden_size, q_dim, {0, -1, qb, qe}, attn},
        {&layer.k, "self_attn.k_proj", c.hidden_size, kv_dim, {0, -1, kb, ke}, attn},
        {&layer.v, "self_attn.v_proj", c.hidden_size, kv_dim, {0, -1, kb, ke}, attn},
        {&layer.o, "self_attn.o_proj", q_dim, c.hidden_size, {qb, qe, 0, -1}, attn},
        {&layer.gate, "mlp.gate_proj", c.hidden_size, c.intermediate_size, {0, -1, sl.mlp_begin, sl.mlp_end}, mlp},
        {&layer.up, "mlp.up_proj", c.hidden_size, c.intermediate_size, {0, -1, sl.mlp_begin, sl.mlp_end}, mlp},
        {&layer.down, "mlp.down_proj", c.intermediate_size, c.hidden_size, {sl.mlp_begin, sl.mlp_end, 0, -1}, mlp},
    };
    for (const Spec& sp : specs) {
      if (t.has(p + sp.name + ".slice.0.trellis")) {
        return absl::UnimplementedError(absl::StrCat("\"", p, sp.name,
                                                     "\" is stored in MLP slices (intermediate_size > 55296), not supported yet"));
      }
      if (!sp.held) continue;
      EXL3_ASSIGN_OR_RETURN(*sp.dst, Linear::load(t, p + sp.name, sp.in, sp.out, sp.slice));
      stored += sp.dst->info().stored_bytes;
      allocated += sp.dst->info().allocated_bytes;
      if (sp.dst->info().exl3) {
        const double n = static_cast<double>(sp.dst->info().in_features) * sp.dst->info().out_features;
        bits_weighted += sp.dst->info().bits * n;
        weights += n;
      }
    }
    layers_.push_back(std::move(layer));
    if (progress) progress(i - s.first_layer + 2, total);
  }
  decoder_bpw_ = weights > 0 ? bits_weighted / weights : 0.0;

  if (s.has_head) {
    EXL3_ASSIGN_OR_RETURN(final_norm_, load_vector(t, "model.norm.weight", c.hidden_size, stored));
    allocated += final_norm_.nbytes();
    const LinearSlice head_slice{0, -1, s.vocab_begin, s.vocab_end};
    if (t.has("lm_head.trellis") || t.has("lm_head.weight")) {
      EXL3_ASSIGN_OR_RETURN(lm_head_, Linear::load(t, "lm_head", c.hidden_size, c.vocab_size, head_slice));
    } else if (c.tie_word_embeddings) {
      EXL3_ASSIGN_OR_RETURN(lm_head_, Linear::load_dense(t, embed_name, c.hidden_size, c.vocab_size, head_slice));
    } else {
      return absl::NotFoundError("missing tensor \"lm_head.weight\" (tie_word_embeddings is false)");
    }
    stored += lm_head_.info().stored_bytes;
    allocated += lm_head_.info().allocated_bytes;
  }
  if (progress) progress(total, total);
  stored_bytes_ = stored;
  allocated_bytes_ = allocated;
  return absl::OkStatus();
}

KvCacheShape LlamaModel::cache_shape(int64_t num_pages, int64_t page_size) const {
  KvCacheShape shape;
  shape.layer_kv_heads.assign(config_.num_layers, 0);
  for (int64_t l = shard_.first_layer; l < shard_.end_layer; ++l) shape.layer_kv_heads[l] = shard_.local_kv_heads(l);
  shape.head_dim = config_.head_dim;
  shape.num_pages = num_pages;
  shape.page_size = page_size;
  return shape;
}

absl::Status LlamaModel::run_layer(const DecoderLayer& layer, int64_t index, Tensor& x,
                                   std::span<const BatchEntry> batch, std::span<const int32_t> positions,
                                   KvCache& cache, Communicator* comm) const {
  const ModelConfig& c = config_;
  const int64_t n = x.dim(0), hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool tensor_parallel = shard_.mode == ShardMode::kTensorParallel;

  Tensor attn_out = Tensor::zeros(DType::kF32, {n, c.hidden_size});
  if (layer.heads > 0) {
    const Tensor h = rms_norm_ref(x, layer.input_norm, eps);
    Tensor q = layer.q.forward(h).reshape({n, layer.heads, hd});
    Tensor k = layer.k.forward(h).reshape({n, layer.kv_heads, hd});
    Tensor v = layer.v.forward(h).reshape({n, layer.kv_heads, hd});
    if (c.qk_norm) {
      q = rms_norm_ref(q, layer.q_norm, eps);
      k = rms_norm_ref(k, layer.k_norm, eps);
    }
    rope_ref(q, positions, rope_.inv_freq, rope_.attention_scaling);
    rope_ref(k, positions, rope_.inv_freq, rope_.attention_scaling);
    PagedKv& kv = cache.layer(index);
    Tensor a = Tensor::zeros(DType::kF32, {n, layer.heads * hd});
    int64_t offset = 0;
    for (const BatchEntry& e : batch) {
      const int64_t len = static_cast<int64_t>(e.tokens.size());
      const auto pos = positions.subspan(offset, len);
      kv_write_ref(kv, e.page_table, pos, take_rows(k, offset, len), take_rows(v, offset, len));
      const Tensor out = attention(take_rows(q, offset, len), kv, e.page_table, pos);
      std::copy_n(out.data<float>(), out.numel(), a.mutable_data<float>() + offset * layer.heads * hd);
      offset += len;
    }
    attn_out = layer.o.forward(a);
  }
  if (tensor_parallel) EXL3_RETURN_IF_ERROR(all_reduce(comm, attn_out));
  add_inplace_ref(x, attn_out);

  Tensor mlp_out = Tensor::zeros(DType::kF32, {n, c.hidden_size});
  if (layer.gate.info().out_features > 0) {
    const Tensor h = rms_norm_ref(x, layer.post_norm, eps);
    mlp_out = layer.down.forward(silu_mul_ref(layer.gate.forward(h), layer.up.forward(h)));
  }
  if (tensor_parallel) EXL3_RETURN_IF_ERROR(all_reduce(comm, mlp_out));
  add_inplace_ref(x, mlp_out);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LlamaModel::forward_batch(std::span<const BatchEntry> batch, KvCache& cache,
                                                 Communicator* comm) const {
  const ModelConfig& c = config_;
  const bool layer_split = shard_.mode == ShardMode::kLayers && comm != nullptr && comm->world_size() > 1;
  std::vector<int32_t> tokens, positions;
  for (const BatchEntry& e : batch) {
    EXL3_CHECK(!e.tokens.empty(), "batch entry without tokens");
    EXL3_CHECK(static_cast<int64_t>(e.page_table.size()) * cache.shape().page_size >=
                   e.start_pos + static_cast<int64_t>(e.tokens.size()),
               "page table holds ", e.page_table.size(), " pages, need ", e.start_pos + e.tokens.size(), " positions");
    for (size_t i = 0; i < e.tokens.size(); ++i) {
      tokens.push_back(e.tokens[i]);
      positions.push_back(e.start_pos + static_cast<int32_t>(i));
    }
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  // A layer-split rank holding nothing before the embedding rank or after the head rank has no
  // part in the pipeline (one between them relays the hidden state).
  if (layer_split && !shard_.has_embedding && !shard_.has_head && shard_.first_layer == shard_.end_layer &&
      (shard_.first_layer == 0 || shard_.first_layer == c.num_layers)) {
    return Tensor::zeros(DType::kF32, {0, c.vocab_size});
  }
  Tensor x;
  if (shard_.has_embedding) {
    x = embedding_ref(embedding_, tokens);
  } else {
    x = Tensor::zeros(DType::kF32, {n, c.hidden_size});
    EXL3_CHECK(layer_split, "a shard without the embedding needs a layer-split communicator");
    EXL3_RETURN_IF_ERROR(comm->recv(std::span<float>(x.mutable_data<float>(), x.numel()), comm->rank() - 1));
  }
  for (int64_t l = shard_.first_layer; l < shard_.end_layer; ++l) {
    EXL3_RETURN_IF_ERROR(run_layer(layers_[l - shard_.first_layer], l, x, batch, positions, cache, comm));
  }
  if (!shard_.has_head) {
    EXL3_CHECK(layer_split, "a shard without the head needs a layer-split communicator");
    EXL3_RETURN_IF_ERROR(comm->send(std::span<const float>(x.data<float>(), x.numel()), comm->rank() + 1));
    return Tensor::zeros(DType::kF32, {0, c.vocab_size});
  }

  std::vector<int64_t> rows;
  int64_t offset = 0;
  for (const BatchEntry& e : batch) {
    const int64_t len = static_cast<int64_t>(e.tokens.size());
    if (e.logits == LogitsMode::kAll) {
      for (int64_t i = 0; i < len; ++i) rows.push_back(offset + i);
    } else if (e.logits == LogitsMode::kLast) {
      rows.push_back(offset + len - 1);
    }
    offset += len;
  }
  const int64_t r = static_cast<int64_t>(rows.size());
  Tensor selected = Tensor::zeros(DType::kF32, {r, c.hidden_size});
  for (int64_t i = 0; i < r; ++i) {
    std::copy_n(x.data<float>() + rows[i] * c.hidden_size, c.hidden_size,
                selected.mutable_data<float>() + i * c.hidden_size);
  }
  const Tensor normed = rms_norm_ref(selected, final_norm_, static_cast<float>(c.rms_norm_eps));
  const Tensor local = lm_head_.forward(normed);  // [r, vocab_end - vocab_begin]
  const bool gather = shard_.mode == ShardMode::kTensorParallel && comm != nullptr && comm->world_size() > 1;
  if (!gather) {
    EXL3_CHECK(local.dim(1) == c.vocab_size, "a single head rank must hold the whole vocabulary");
    return local;
  }
  // Every rank's vocabulary width (learned once), then the row-major [r, width] blocks in rank order.
  if (vocab_widths_.empty()) {
    std::vector<float> mine = {static_cast<float>(local.dim(1))};
    std::vector<float> all(comm->world_size());
    const std::vector<int64_t> ones(comm->world_size(), 1);
    EXL3_RETURN_IF_ERROR(comm->all_gather(mine, all, ones));
    int64_t vocab_total = 0;
    for (float w : all) vocab_total += static_cast<int64_t>(w);
    EXL3_CHECK_EQ(vocab_total, c.vocab_size, "the ranks' vocabulary ranges must cover the vocabulary once");
    for (float w : all) vocab_widths_.push_back(static_cast<int64_t>(w));
  }
  std::vector<int64_t> counts(comm->world_size());
  for (int i = 0; i < comm->world_size(); ++i) counts[i] = vocab_widths_[i] * r;
  std::vector<float> gathered(r * c.vocab_size);
  EXL3_RETURN_IF_ERROR(comm->all_gather(std::span<const float>(local.data<float>(), local.numel()), gathered, counts));
  Tensor logits = Tensor::zeros(DType::kF32, {r, c.vocab_size});
  int64_t block = 0, column = 0;
  for (int i = 0; i < comm->world_size(); ++i) {
    const int64_t width = vocab_widths_[i];
    for (int64_t row = 0; row < r; ++row) {
      std::copy_n(gathered.data() + block + row * width, width,
                  logits.mutable_data<float>() + row * c.vocab_size + column);
    }
    block += counts[i];
    column += width;
  }
  return logits;
}

Tensor LlamaModel::forward(std::span<const int32_t> ids, int32_t start_pos, KvCache& cache, const PageTable& pages,
                           LogitsMode mode) const {
  const BatchEntry entry{ids, start_pos, pages.pages, mode};
  absl::StatusOr<Tensor> logits = forward_batch(std::span<const BatchEntry>(&entry, 1), cache, nullptr);
  EXL3_CHECK_OK(logits.status());
  return *std::move(logits);
}

}  // namespace exl3
