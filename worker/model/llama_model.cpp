// Llama-family weight loading (whole model or one rank's shard) and the batched forward pass.
#include "worker/model/llama_model.h"

#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"

namespace exl3 {
namespace {

absl::StatusOr<Tensor> load_vector(const SafetensorsCollection& t, const std::string& name, int64_t size,
                                   uint64_t& stored, Backend& backend) {
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
  return backend.prepare_tensor(w, DType::kF32, name);
}

// Tensor parallel: residual += the sum of every rank's `part`, in one collective where the
// communicator fuses the add (the one-shot all-reduce), else an all-reduce and the backend's add.
absl::Status add_all_ranks(Communicator& comm, Backend& be, Tensor& part, Tensor& residual) {
  if (comm.fuses_residual_add(part, residual)) return comm.all_reduce_add(part, residual);
  EXL3_RETURN_IF_ERROR(comm.all_reduce_sum(part));
  be.add(residual, part);
  return absl::OkStatus();
}

}  // namespace

// Sizes of one step: n tokens of s sequences with page tables of p pages, r logits rows.
struct LlamaModel::StepDims {
  int64_t tokens = 0, seqs = 0, pages = 0, logit_rows = 0;
};

// Every buffer one step uses, taken from the workspace in one fixed order (so sizes and offsets
// follow from StepDims alone). Layer buffers are sized for the widest layer and reused.
struct LlamaModel::StepBuffers {
  StepMeta meta;
  Tensor x;                // F32 [n, hidden], the residual stream
  Tensor h;                // A [n, hidden], normed input of attention / MLP
  Tensor q, k, v, attn;    // A [n, heads * hd], [n, kv * hd] x2, [n, heads * hd]
  Tensor proj;             // F32 [n, hidden], o_proj / down_proj output
  Tensor gate, up, act;    // A [n, mlp columns]
  Tensor selected;         // F32 [r, hidden]
  Tensor normed;           // A [r, hidden]
  Tensor logits;           // F32 [r, local vocab]
  Tensor gathered;         // F32 [r * vocab] (tensor parallel over several ranks)
  Tensor packed;           // F32 [r, vocab]: the gathered blocks re-packed by rows (tensor parallel)
  Tensor widths;           // F32 [1] and [world]: the head widths exchanged once
  Tensor all_widths;
};

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& model_dir,
                                                             const LoadProgress& progress) {
  EXL3_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(model_dir));
  return load_shard(model_dir, ModelShard::full(config), progress);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load_shard(const std::string& model_dir,
                                                                   const ModelShard& shard,
                                                                   const LoadProgress& progress) {
  return load_shard(model_dir, shard, std::shared_ptr<Backend>(make_cpu_backend()), progress);
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load_shard(const std::string& model_dir,
                                                                   const ModelShard& shard,
                                                                   std::shared_ptr<Backend> backend,
                                                                   const LoadProgress& progress) {
  std::unique_ptr<LlamaModel> model(new LlamaModel());
  EXL3_ASSIGN_OR_RETURN(model->config_, load_model_config(model_dir));
  EXL3_RETURN_IF_ERROR(shard.validate(model->config_));
  model->shard_ = shard;
  model->backend_ = std::move(backend);
  model->rope_ = compute_rope(model->config_);
  EXL3_ASSIGN_OR_RETURN(SafetensorsCollection tensors, SafetensorsCollection::open_dir(model_dir));
  const uint64_t before = model->backend_->allocated_bytes();
  EXL3_RETURN_IF_ERROR(model->load_weights(tensors, progress));
  model->allocated_bytes_ = model->backend_->allocated_bytes() - before;
  const Tensor inv_freq = Tensor::from_vector(model->rope_.inv_freq, {static_cast<int64_t>(model->rope_.inv_freq.size())});
  EXL3_ASSIGN_OR_RETURN(model->inv_freq_, model->backend_->prepare_tensor(inv_freq, DType::kF32, "rope inv_freq"));
  return model;
}

LlamaModel::~LlamaModel() {
  // A replay may still be running: wait before the graphs go.
  if (graphs_.size() > 0 && backend_ != nullptr) {
    const absl::Status waited = backend_->synchronize();
    if (!waited.ok()) std::fprintf(stderr, "step graphs: teardown: %s\n", std::string(waited.message()).c_str());
  }
  graphs_.clear();
}

absl::Status LlamaModel::load_weights(const SafetensorsCollection& t, const LoadProgress& progress) {
  const ModelConfig& c = config_;
  const ModelShard& s = shard_;
  Backend& be = *backend_;
  const int64_t total = (s.end_layer - s.first_layer) + 2;
  uint64_t stored = 0;

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
    // The CPU backend computes in fp32; a device backend keeps the stored 16-bit table in pinned
    // host memory and reads the step's rows in place.
    const DType dtype = be.activation_dtype() == DType::kF32 ? DType::kF32 : e.dtype();
    EXL3_ASSIGN_OR_RETURN(embedding_, be.prepare_host_table(e, dtype, embed_name));
  }
  if (progress) progress(1, total);

  const int64_t group = c.num_heads / c.num_kv_heads, hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd;
  double bits_weighted = 0.0, weights = 0.0;
  for (int64_t i = s.first_layer; i < s.end_layer; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const LayerSlice& sl = s.slice(i);
    DecoderLayer layer;
    EXL3_ASSIGN_OR_RETURN(layer.input_norm, load_vector(t, p + "input_layernorm.weight", c.hidden_size, stored, be));
    EXL3_ASSIGN_OR_RETURN(layer.post_norm, load_vector(t, p + "post_attention_layernorm.weight", c.hidden_size, stored, be));
    layer.kv_heads = sl.kv_head_end - sl.kv_head_begin;
    layer.heads = layer.kv_heads * group;
    if (c.qk_norm && layer.heads > 0) {
      EXL3_ASSIGN_OR_RETURN(layer.q_norm, load_vector(t, p + "self_attn.q_norm.weight", hd, stored, be));
      EXL3_ASSIGN_OR_RETURN(layer.k_norm, load_vector(t, p + "self_attn.k_norm.weight", hd, stored, be));
    }
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
      EXL3_ASSIGN_OR_RETURN(*sp.dst, Linear::load(t, p + sp.name, sp.in, sp.out, sp.slice, be));
      stored += sp.dst->info().stored_bytes;
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
    EXL3_ASSIGN_OR_RETURN(final_norm_, load_vector(t, "model.norm.weight", c.hidden_size, stored, be));
    const LinearSlice head_slice{0, -1, s.vocab_begin, s.vocab_end};
    if (t.has("lm_head.trellis") || t.has("lm_head.weight")) {
      EXL3_ASSIGN_OR_RETURN(lm_head_, Linear::load(t, "lm_head", c.hidden_size, c.vocab_size, head_slice, be));
    } else if (c.tie_word_embeddings) {
      EXL3_ASSIGN_OR_RETURN(lm_head_, Linear::load_dense(t, embed_name, c.hidden_size, c.vocab_size, head_slice, be));
    } else {
      return absl::NotFoundError("missing tensor \"lm_head.weight\" (tie_word_embeddings is false)");
    }
    stored += lm_head_.info().stored_bytes;
  }
  if (progress) progress(total, total);
  stored_bytes_ = stored;
  return absl::OkStatus();
}

KvCacheShape LlamaModel::cache_shape(int64_t num_pages, int64_t page_size, const KvCacheBits& bits) const {
  KvCacheShape shape;
  shape.layer_kv_heads.assign(config_.num_layers, 0);
  for (int64_t l = shard_.first_layer; l < shard_.end_layer; ++l) shape.layer_kv_heads[l] = shard_.local_kv_heads(l);
  shape.head_dim = config_.head_dim;
  shape.num_pages = num_pages;
  shape.page_size = page_size;
  shape.window = config_.sliding_window;
  shape.k_bits = bits.k;
  shape.v_bits = bits.v;
  return shape;
}

absl::StatusOr<LlamaModel::StepBuffers> LlamaModel::take_buffers(const StepDims& d, Workspace& w) const {
  const ModelConfig& c = config_;
  const DType a = backend_->activation_dtype();
  int64_t heads = 0, kv = 0, mlp = 0;
  for (const LayerSlice& sl : shard_.layers) {
    kv = std::max(kv, sl.kv_head_end - sl.kv_head_begin);
    mlp = std::max(mlp, sl.mlp_end - sl.mlp_begin);
  }
  heads = kv * (c.num_heads / c.num_kv_heads);
  const int64_t n = d.tokens, r = d.logit_rows, hd = c.head_dim;
  const int64_t local_vocab = shard_.has_head ? shard_.vocab_end - shard_.vocab_begin : 0;
  const bool gather = shard_.mode == ShardMode::kTensorParallel && shard_.world_size > 1 && shard_.has_head;
  StepBuffers b;
  EXL3_ASSIGN_OR_RETURN(b.meta.tokens, w.take(DType::kI32, {n}, "token ids"));
  EXL3_ASSIGN_OR_RETURN(b.meta.positions, w.take(DType::kI32, {n}, "positions"));
  EXL3_ASSIGN_OR_RETURN(b.meta.token_seq, w.take(DType::kI32, {n}, "token sequences"));
  EXL3_ASSIGN_OR_RETURN(b.meta.page_table, w.take(DType::kI32, {d.seqs, d.pages}, "page tables"));
  EXL3_ASSIGN_OR_RETURN(b.meta.logit_rows, w.take(DType::kI32, {r}, "logits rows"));
  EXL3_ASSIGN_OR_RETURN(b.x, w.take(DType::kF32, {n, c.hidden_size}, "hidden state"));
  EXL3_ASSIGN_OR_RETURN(b.h, w.take(a, {n, c.hidden_size}, "normed hidden state"));
  EXL3_ASSIGN_OR_RETURN(b.q, w.take(a, {n, heads, hd}, "queries"));
  EXL3_ASSIGN_OR_RETURN(b.k, w.take(a, {n, kv, hd}, "keys"));
  EXL3_ASSIGN_OR_RETURN(b.v, w.take(a, {n, kv, hd}, "values"));
  EXL3_ASSIGN_OR_RETURN(b.attn, w.take(a, {n, heads * hd}, "attention output"));
  EXL3_ASSIGN_OR_RETURN(b.proj, w.take(DType::kF32, {n, c.hidden_size}, "projection output"));
  EXL3_ASSIGN_OR_RETURN(b.gate, w.take(a, {n, mlp}, "MLP gate"));
  EXL3_ASSIGN_OR_RETURN(b.up, w.take(a, {n, mlp}, "MLP up"));
  EXL3_ASSIGN_OR_RETURN(b.act, w.take(a, {n, mlp}, "MLP activation"));
  EXL3_ASSIGN_OR_RETURN(b.selected, w.take(DType::kF32, {r, c.hidden_size}, "head input rows"));
  EXL3_ASSIGN_OR_RETURN(b.normed, w.take(a, {r, c.hidden_size}, "normed head input"));
  EXL3_ASSIGN_OR_RETURN(b.logits, w.take(DType::kF32, {r, local_vocab}, "logits"));
  EXL3_ASSIGN_OR_RETURN(b.gathered, w.take(DType::kF32, {gather ? r * c.vocab_size : 0}, "gathered logits"));
  EXL3_ASSIGN_OR_RETURN(b.packed, w.take(DType::kF32, {gather ? r : 0, c.vocab_size}, "packed logits"));
  EXL3_ASSIGN_OR_RETURN(b.widths, w.take(DType::kF32, {1}, "head width"));
  EXL3_ASSIGN_OR_RETURN(b.all_widths, w.take(DType::kF32, {shard_.world_size}, "head widths"));
  b.meta.num_tokens = n;
  b.meta.num_seqs = d.seqs;
  b.meta.max_pages = d.pages;
  b.meta.num_logit_rows = r;
  return b;
}

uint64_t LlamaModel::workspace_bytes_for(const StepLimits& limits) const {
  // The same takes as a step at the limits, on a workspace that only counts: one layout.
  Workspace counter = Workspace::counter();
  const StepDims dims{limits.max_step_tokens, limits.max_seqs, limits.max_pages_per_seq, limits.max_logit_rows};
  EXL3_CHECK_OK(take_buffers(dims, counter).status());
  return counter.used();
}

absl::Status LlamaModel::reserve_limits(const StepLimits& limits) const {
  if (limits.max_step_tokens < 1 || limits.max_seqs < 1 || limits.max_pages_per_seq < 1 || limits.max_logit_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model limits must be >= 1: ", limits.max_step_tokens, " tokens, ",
                                                   limits.max_seqs, " sequences, ", limits.max_pages_per_seq,
                                                   " pages, ", limits.max_logit_rows, " logits rows"));
  }
  // The graphs point into the old workspace and scratch: drop them (after any replay finished).
  if (graphs_.size() > 0) {
    EXL3_RETURN_IF_ERROR(backend_->synchronize());
    graphs_.clear();
  }
  workspace_ = Workspace();  // frees the old arena first
  EXL3_ASSIGN_OR_RETURN(workspace_, Workspace::create(*backend_, workspace_bytes_for(limits)));
  int64_t widest = config_.hidden_size;
  for (const DecoderLayer& l : layers_) {
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      widest = std::max({widest, lin->info().in_features, lin->info().out_features});
    }
  }
  if (shard_.has_head) widest = std::max(widest, lm_head_.info().out_features);
  EXL3_RETURN_IF_ERROR(backend_->reserve_scratch(limits.max_step_tokens, (widest + 127) / 128 * 128));
  limits_ = limits;
  return absl::OkStatus();
}

absl::Status LlamaModel::run_layer(const DecoderLayer& layer, const DecoderLayer* next, int64_t index, StepBuffers& b,
                                   const StepMeta& meta, KvCache& cache, Communicator* comm,
                                   NormHandoff& handoff) const {
  const ModelConfig& c = config_;
  Backend& be = *backend_;
  const int64_t n = meta.num_tokens, hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool tensor_parallel = shard_.mode == ShardMode::kTensorParallel && comm != nullptr && comm->world_size() > 1;

  Tensor proj = b.proj;
  if (layer.heads > 0) {
    Tensor h = b.h;
    Tensor q = b.q.view_bytes(0, b.q.dtype(), {n, layer.heads, hd});
    Tensor k = b.k.view_bytes(0, b.k.dtype(), {n, layer.kv_heads, hd});
    Tensor v = b.v.view_bytes(0, b.v.dtype(), {n, layer.kv_heads, hd});
    const LinearWeights* qkv[] = {&layer.q.weights(), &layer.k.weights(), &layer.v.weights()};
    PagedKv& kv = cache.layer(index);
    if (c.qk_norm) {  // the per-head norms come between the projections and the rotation
      Tensor qkv_out[] = {q.reshape({n, layer.heads * hd}), k.reshape({n, layer.kv_heads * hd}),
                          v.reshape({n, layer.kv_heads * hd})};
      be.norm_linears(b.x, layer.input_norm, eps, h, qkv, qkv_out, &handoff);
      be.rms_norm(q, layer.q_norm, eps, q);
      be.rms_norm(k, layer.k_norm, eps, k);
      be.rope_kv_write(q, k, v, inv_freq_, rope_.attention_scaling, kv, meta);
    } else {
      be.norm_qkv_rope_kv_write(b.x, layer.input_norm, eps, h, qkv, q, k, v, inv_freq_, rope_.attention_scaling, kv,
                                meta, &handoff);
    }
    Tensor attn = b.attn.view_bytes(0, b.attn.dtype(), {n, layer.heads, hd});
    be.attention(q, kv, meta, attn);
    Tensor attn2 = attn.reshape({n, layer.heads * hd});
    if (tensor_parallel) {
      be.linear(layer.o.weights(), attn2, proj);
    } else {
      // The MLP's norm may be done in the same pass (NormHandoff).
      handoff = NormHandoff{};
      if (layer.gate.info().out_features > 0) {
        handoff = {&layer.post_norm, eps, {&layer.gate.weights(), &layer.up.weights()}, 2};
      }
      be.linear_add(layer.o.weights(), attn2, proj, b.x, &handoff, nullptr);
    }
  } else {
    be.zero(proj);
  }
  // Tensor parallel: the residual takes the sum of every rank's part.
  if (tensor_parallel) EXL3_RETURN_IF_ERROR(add_all_ranks(*comm, be, proj, b.x));

  const int64_t mlp = layer.gate.info().out_features;
  if (mlp > 0) {
    Tensor h = b.h;
    Tensor gate = b.gate.view_bytes(0, b.gate.dtype(), {n, mlp});
    Tensor up = b.up.view_bytes(0, b.up.dtype(), {n, mlp});
    Tensor act = b.act.view_bytes(0, b.act.dtype(), {n, mlp});
    // The down projection's input transform may be done in the gated product's pass (InputHandoff).
    InputHandoff down_input{&layer.down.weights()};
    be.norm_gate_up_silu(b.x, layer.post_norm, eps, h, layer.gate.weights(), layer.up.weights(), gate, up, act,
                         &handoff, tensor_parallel ? nullptr : &down_input);
    if (tensor_parallel) {
      be.linear(layer.down.weights(), act, proj);
    } else {
      // The next layer's attention norm may be done in the same pass.
      handoff = NormHandoff{};
      if (next != nullptr && next->heads > 0) {
        handoff = {&next->input_norm, eps, {&next->q.weights(), &next->k.weights(), &next->v.weights()}, 3};
      }
      be.linear_add(layer.down.weights(), act, proj, b.x, &handoff, &down_input);
    }
  } else {
    be.zero(proj);
  }
  if (tensor_parallel) EXL3_RETURN_IF_ERROR(add_all_ranks(*comm, be, proj, b.x));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LlamaModel::forward_batch(std::span<const BatchEntry> batch, KvCache& cache,
                                                 Communicator* comm) const {
  EXL3_ASSIGN_OR_RETURN(const Tensor device_logits, forward_batch_device(batch, cache, comm));
  Tensor logits = Tensor::zeros(DType::kF32, {device_logits.dim(0), config_.vocab_size});
  if (device_logits.dim(0) > 0) {
    backend_->download(device_logits, logits);
    EXL3_RETURN_IF_ERROR(backend_->synchronize());
  }
  return logits;
}

absl::StatusOr<Tensor> LlamaModel::forward_batch_device(std::span<const BatchEntry> batch, KvCache& cache,
                                                        Communicator* comm) const {
  const ModelConfig& c = config_;
  Backend& be = *backend_;
  const bool layer_split = shard_.mode == ShardMode::kLayers && comm != nullptr && comm->world_size() > 1;
  const int64_t page_size = cache.shape().page_size;
  // Host side of the step's metadata.
  std::vector<int32_t> tokens, positions, token_seq, logit_rows;
  int64_t max_pages = 1;
  int32_t max_position = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const BatchEntry& e = batch[s];
    EXL3_CHECK(!e.tokens.empty(), "batch entry without tokens");
    EXL3_CHECK(static_cast<int64_t>(e.page_table.size()) * page_size >= e.start_pos + static_cast<int64_t>(e.tokens.size()),
               "page table holds ", e.page_table.size(), " pages, need ", e.start_pos + e.tokens.size(), " positions");
    const int64_t first = static_cast<int64_t>(tokens.size()), len = static_cast<int64_t>(e.tokens.size());
    for (int64_t i = 0; i < len; ++i) {
      tokens.push_back(e.tokens[i]);
      positions.push_back(e.start_pos + static_cast<int32_t>(i));
      token_seq.push_back(static_cast<int32_t>(s));
    }
    if (e.logits == LogitsMode::kAll) {
      for (int64_t i = 0; i < len; ++i) logit_rows.push_back(static_cast<int32_t>(first + i));
    } else if (e.logits == LogitsMode::kLast) {
      logit_rows.push_back(static_cast<int32_t>(first + len - 1));
    }
    max_pages = std::max<int64_t>(max_pages, static_cast<int64_t>(e.page_table.size()));
    max_position = std::max<int32_t>(max_position, e.start_pos + static_cast<int32_t>(len) - 1);
  }
  const int64_t n = static_cast<int64_t>(tokens.size()), seqs = static_cast<int64_t>(batch.size());
  const int64_t r = static_cast<int64_t>(logit_rows.size());
  // A layer-split rank holding nothing before the embedding rank or after the head rank has no
  // part in the pipeline (one between them relays the hidden state).
  if (layer_split && !shard_.has_embedding && !shard_.has_head && shard_.first_layer == shard_.end_layer &&
      (shard_.first_layer == 0 || shard_.first_layer == c.num_layers)) {
    return Tensor::zeros(DType::kF32, {0, c.vocab_size});
  }
  if (n > limits_.max_step_tokens || seqs > limits_.max_seqs || max_pages > limits_.max_pages_per_seq ||
      r > limits_.max_logit_rows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "step of ", n, " tokens, ", seqs, " sequences, ", max_pages, " pages per sequence, ", r,
        " logits rows exceeds the limits the model was loaded for (", limits_.max_step_tokens, ", ", limits_.max_seqs,
        ", ", limits_.max_pages_per_seq, ", ", limits_.max_logit_rows, ")"));
  }
  // A graph step takes its buffers for the bucket: page tables padded to a power of two of columns
  // (zeros past each sequence's pages, never read) and max_position the bucket's last position, an
  // upper bound (attention plans its key splits on the host from it and checks positions against it).
  bool graph = graph_eligible(batch, comm);
  int64_t pages = max_pages;
  if (graph) {
    int64_t bucket = 1;
    while (bucket < max_pages) bucket *= 2;
    bucket = std::min(bucket, limits_.max_pages_per_seq);
    graph = bucket * page_size - 1 < std::numeric_limits<int32_t>::max();
    if (graph) pages = bucket;
  }
  std::vector<int32_t> page_table(seqs * pages, 0);
  for (int64_t s = 0; s < seqs; ++s) {
    std::copy(batch[s].page_table.begin(), batch[s].page_table.end(), page_table.begin() + s * pages);
  }

  workspace_.reset();
  EXL3_ASSIGN_OR_RETURN(StepBuffers b, take_buffers(StepDims{n, seqs, pages, r}, workspace_));
  b.meta.max_position = graph ? static_cast<int32_t>(pages * page_size - 1) : max_position;
  be.upload(Tensor::from_vector(tokens, {n}), b.meta.tokens);
  be.upload(Tensor::from_vector(positions, {n}), b.meta.positions);
  be.upload(Tensor::from_vector(token_seq, {n}), b.meta.token_seq);
  be.upload(Tensor::from_vector(page_table, {seqs, pages}), b.meta.page_table);
  be.upload(Tensor::from_vector(logit_rows, {r}), b.meta.logit_rows);

  Tensor logits;
  bool replayed = false;
  if (graph) {
    const StepGraphKey key{seqs, pages, cache.id(), comm};
    const absl::Status status = replay_graph(key, b, cache, comm);
    if (status.ok()) {
      logits = head_output(b, comm);
      replayed = true;
    } else {
      std::fprintf(stderr, "step graphs off for this model, running every step eagerly: %s\n",
                   std::string(status.message()).c_str());
      graphs_failed_ = true;  // the graphs already made stay until the model goes (one may be running)
    }
  }
  if (!replayed) {
    EXL3_ASSIGN_OR_RETURN(logits, issue_step(b, cache, comm));
  }
  if (!shard_.has_head) {
    EXL3_RETURN_IF_ERROR(comm->flush());
    EXL3_RETURN_IF_ERROR(be.synchronize());
    return Tensor::zeros(DType::kF32, {0, c.vocab_size});
  }
  // The step's one wait for its collectives (within the communicator's deadline), before anything
  // reads its results.
  if (comm != nullptr) EXL3_RETURN_IF_ERROR(comm->flush());
  return logits;
}

absl::StatusOr<Tensor> LlamaModel::issue_step(StepBuffers& b, KvCache& cache, Communicator* comm) const {
  const bool layer_split = shard_.mode == ShardMode::kLayers && comm != nullptr && comm->world_size() > 1;
  if (shard_.has_embedding) {
    backend_->embedding(embedding_, b.meta.tokens, b.x);
  } else {
    EXL3_CHECK(layer_split, "a shard without the embedding needs a layer-split communicator");
    EXL3_RETURN_IF_ERROR(comm->recv(b.x, comm->rank() - 1));
  }
  // What each linear_add hands to the norm after it (NormHandoff); the first layer's norm has none.
  NormHandoff handoff;
  for (int64_t l = shard_.first_layer; l < shard_.end_layer; ++l) {
    const int64_t i = l - shard_.first_layer;
    const DecoderLayer* next = l + 1 < shard_.end_layer ? &layers_[i + 1] : nullptr;
    EXL3_RETURN_IF_ERROR(run_layer(layers_[i], next, l, b, b.meta, cache, comm, handoff));
  }
  if (!shard_.has_head) {
    EXL3_CHECK(layer_split, "a shard without the head needs a layer-split communicator");
    EXL3_RETURN_IF_ERROR(comm->send(b.x, comm->rank() + 1));
    return Tensor();
  }
  return run_head(b, b.meta, comm);
}

bool LlamaModel::graph_eligible(std::span<const BatchEntry> batch, Communicator* comm) const {
  if (!limits_.step_graphs || graphs_failed_ || !backend_->supports_step_graphs()) return false;
  if (!shard_.has_embedding || !shard_.has_head) return false;
  for (const BatchEntry& e : batch) {
    if (e.tokens.size() != 1 || e.logits != LogitsMode::kLast) return false;
  }
  if (comm == nullptr || comm->world_size() == 1) return true;
  // Layer splits exchange hidden states with host waits between ranks; a tensor-parallel head
  // learns the ranks' vocabulary widths with a host round trip on its first step.
  return shard_.mode == ShardMode::kTensorParallel && comm->supports_graph_capture() && !vocab_widths_.empty();
}

absl::Status LlamaModel::replay_graph(const StepGraphKey& key, StepBuffers& b, KvCache& cache,
                                      Communicator* comm) const {
  StepGraph* graph = graphs_.find(key);
  if (graph == nullptr) {
    // Capturing records the work without running it; the replay below runs it.
    absl::StatusOr<std::unique_ptr<StepGraph>> captured =
        backend_->capture_step([&]() { return issue_step(b, cache, comm).status(); });
    if (!captured.ok()) {
      return absl::Status(captured.status().code(),
                          absl::StrCat("capturing the step graph of ", key.seqs, " sequences, ", key.pages,
                                       " page columns: ", captured.status().message()));
    }
    // The oldest graph may still be running when it is dropped to make room.
    if (graphs_.full()) EXL3_RETURN_IF_ERROR(backend_->synchronize());
    graph = &graphs_.insert(key, *std::move(captured));
    ++graph_captures_;
  }
  EXL3_RETURN_IF_ERROR(backend_->replay_step(*graph));
  ++graph_replays_;
  return absl::OkStatus();
}

Tensor LlamaModel::head_output(const StepBuffers& b, Communicator* comm) const {
  const bool gather = shard_.mode == ShardMode::kTensorParallel && comm != nullptr && comm->world_size() > 1;
  return gather ? b.packed : b.logits;
}

absl::StatusOr<Tensor> LlamaModel::run_head(StepBuffers& b, const StepMeta& meta, Communicator* comm) const {
  const ModelConfig& c = config_;
  Backend& be = *backend_;
  const int64_t r = meta.num_logit_rows;
  // A step without logits rows (a prompt chunk before its last) has no head work; every rank of a
  // tensor-parallel group sees the same rows, so they all skip the gather together.
  if (r == 0) return head_output(b, comm);
  be.gather_rows(b.x, meta.logit_rows, b.selected);
  be.rms_norm(b.selected, final_norm_, static_cast<float>(c.rms_norm_eps), b.normed);
  be.linear(lm_head_.weights(), b.normed, b.logits);  // [r, vocab_end - vocab_begin]
  const bool gather = shard_.mode == ShardMode::kTensorParallel && comm != nullptr && comm->world_size() > 1;
  if (!gather) {
    EXL3_CHECK(b.logits.dim(1) == c.vocab_size, "a single head rank must hold the whole vocabulary");
    return head_output(b, comm);
  }
  // Every rank's vocabulary width (learned once), then the row-major [r, width] blocks in rank order.
  const int world = comm->world_size();
  if (vocab_widths_.empty()) {
    be.upload(Tensor::from_vector(std::vector<float>{static_cast<float>(b.logits.dim(1))}, {1}), b.widths);
    const std::vector<int64_t> ones(world, 1);
    EXL3_RETURN_IF_ERROR(comm->all_gather(b.widths, b.all_widths, ones));
    EXL3_RETURN_IF_ERROR(comm->flush());
    Tensor all = Tensor::zeros(DType::kF32, {world});
    be.download(b.all_widths, all);
    int64_t vocab_total = 0;
    for (int i = 0; i < world; ++i) vocab_total += static_cast<int64_t>(all.data<float>()[i]);
    EXL3_CHECK_EQ(vocab_total, c.vocab_size, "the ranks' vocabulary ranges must cover the vocabulary once");
    for (int i = 0; i < world; ++i) vocab_widths_.push_back(static_cast<int64_t>(all.data<float>()[i]));
  }
  std::vector<int64_t> counts(world);
  for (int i = 0; i < world; ++i) counts[i] = vocab_widths_[i] * r;
  EXL3_RETURN_IF_ERROR(comm->all_gather(b.logits.reshape({b.logits.numel()}), b.gathered, counts));
  // Rank i's block is row-major [r, width_i]: it becomes columns [column_i, column_i + width_i).
  int64_t block = 0, column = 0;
  for (int i = 0; i < world; ++i) {
    const int64_t width = vocab_widths_[i];
    be.copy_columns(b.gathered.rows(block, counts[i]).reshape({r, width}), b.packed, column);
    block += counts[i];
    column += width;
  }
  return head_output(b, comm);
}

Tensor LlamaModel::forward(std::span<const int32_t> ids, int32_t start_pos, KvCache& cache, const PageTable& pages,
                           LogitsMode mode) const {
  StepLimits need = limits_;
  const int64_t n = static_cast<int64_t>(ids.size()), p = static_cast<int64_t>(pages.pages.size());
  const int64_t rows = mode == LogitsMode::kAll ? n : 1;
  if (!workspace_.capacity() || n > need.max_step_tokens || p > need.max_pages_per_seq || rows > need.max_logit_rows) {
    need.max_step_tokens = std::max(need.max_step_tokens, n);
    need.max_pages_per_seq = std::max(need.max_pages_per_seq, p);
    need.max_logit_rows = std::max(need.max_logit_rows, rows);
    EXL3_CHECK_OK(reserve_limits(need));
  }
  const BatchEntry entry{ids, start_pos, pages.pages, mode};
  absl::StatusOr<Tensor> logits = forward_batch(std::span<const BatchEntry>(&entry, 1), cache, nullptr);
  EXL3_CHECK_OK(logits.status());
  return *std::move(logits);
}

}  // namespace exl3
