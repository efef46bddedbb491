// Building a ModelFootprint from a ModelConfig (and the safetensors headers), and the byte
// arithmetic of slices: what a CPU worker (fp32 dequantized) or a CUDA worker (EXL3 as stored,
// dense F16, norms and biases F32) allocates for a range of units, and the mirrors of the CUDA
// worker's workspace, scratch and fixed overheads.
#include "coordinator/planner/model_footprint.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/attention_scratch.h"
#include "kernels/oneshot_all_reduce_lines.h"

namespace exl3 {
namespace {

constexpr int64_t kSplitAlign = 128;  // EXL3 Hadamard block: every slice boundary is a multiple

int64_t pad128(int64_t v) { return (v + kSplitAlign - 1) / kSplitAlign * kSplitAlign; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint64_t u64(int64_t v) { return static_cast<uint64_t>(v); }

uint64_t tensor_bytes(const TensorInfo& info) { return info.end - info.begin; }

// Fills the storage fields of `part` from the headers; `part.prefix` names the linear.
absl::Status read_linear_storage(const SafetensorsCollection& t, LinearPart& part) {
  const std::string& p = part.prefix;
  if (t.has(p + ".slice.0.trellis")) {
    return absl::UnimplementedError(absl::StrCat("\"", p,
                                                 "\" is stored in MLP slices (intermediate_size > 55296), which the "
                                                 "workers do not load yet"));
  }
  if (const TensorInfo* b = t.find(p + ".bias")) {
    part.has_bias = true;
    part.bias_dtype_size = dtype_size(b->dtype);
  } else {
    part.has_bias = false;
  }
  if (t.has(p + ".trellis") && t.has(p + ".suh") && t.has(p + ".svh")) {
    const TensorInfo* tr = t.find(p + ".trellis");
    if (tr->dtype != DType::kI16 || tr->shape.size() != 3 || tr->shape[0] * 16 != pad128(part.in_features) ||
        tr->shape[1] * 16 != pad128(part.out_features) || tr->shape[2] % 16 != 0 || tr->shape[2] < 16 ||
        tr->shape[2] > 128) {
      return absl::InvalidArgumentError(absl::StrCat(t.file_of(p + ".trellis"), ": tensor \"", p, ".trellis\" is ",
                                                     dtype_name(tr->dtype), " ", shape_string(tr->shape),
                                                     ", expected I16 [", pad128(part.in_features) / 16, ", ",
                                                     pad128(part.out_features) / 16, ", 16*K] with K in 1..8"));
    }
    part.exl3 = true;
    part.trellis_words = tr->shape[2];
    for (const char* marker : {".mcg", ".mul1"}) {
      if (const TensorInfo* m = t.find(p + marker)) part.marker_bytes += tensor_bytes(*m);
    }
    return absl::OkStatus();
  }
  if (const TensorInfo* w = t.find(p + ".weight")) {
    part.exl3 = false;
    part.dense_dtype_size = dtype_size(w->dtype);
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("missing tensor \"", p, ".weight\" (and no EXL3 \"", p, ".trellis\")"));
}

// Bytes of a norm vector; with headers, checks that it exists with the expected length.
absl::StatusOr<uint64_t> vector_bytes(const SafetensorsCollection* t, const std::string& name, int64_t size) {
  if (t == nullptr) return u64(size) * 4;
  const TensorInfo* info = t->find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor \"", name, "\""));
  if (info->shape != Shape{size}) {
    return absl::InvalidArgumentError(absl::StrCat(t->file_of(name), ": tensor \"", name, "\" has shape ",
                                                   shape_string(info->shape), ", expected [", size, "]"));
  }
  return u64(size) * 4;  // both backends keep norms as F32
}

// Bytes of the embedding table [vocab, hidden]: fp32 on the CPU worker, its stored dtype on CUDA
// (where it lives in pinned host memory).
absl::StatusOr<uint64_t> embedding_table_bytes(const ModelConfig& c, BackendKind backend, const SafetensorsCollection* t) {
  const uint64_t fp32 = u64(c.vocab_size) * u64(c.hidden_size) * 4;
  if (t == nullptr) return fp32;
  const std::string name = "model.embed_tokens.weight";
  const TensorInfo* e = t->find(name);
  if (e == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor \"", name, "\""));
  if (e->shape != Shape{c.vocab_size, c.hidden_size}) {
    return absl::InvalidArgumentError(absl::StrCat(t->file_of(name), ": tensor \"", name, "\" has shape ",
                                                   shape_string(e->shape), ", expected [", c.vocab_size, ", ",
                                                   c.hidden_size, "]"));
  }
  return backend == BackendKind::kCpu ? fp32 : tensor_bytes(*e);
}

LinearPart make_part(std::string prefix, int64_t in, int64_t out, bool split_columns, int64_t features_per_unit) {
  LinearPart p;
  p.prefix = std::move(prefix);
  p.in_features = in;
  p.out_features = out;
  p.split_columns = split_columns;
  p.features_per_unit = features_per_unit;
  return p;
}

}  // namespace

absl::StatusOr<BackendKind> parse_backend(const std::string& name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(absl::StrCat("unknown backend \"", name, "\" (expected \"cpu\" or \"cuda\")"));
}

std::string backend_name(BackendKind backend) { return backend == BackendKind::kCpu ? "cpu" : "cuda"; }

std::string component_name(ComponentKind kind) {
  switch (kind) {
    case ComponentKind::kAttention:
      return "attention";
    case ComponentKind::kMlp:
      return "MLP";
    case ComponentKind::kHead:
      return "lm_head";
  }
  return "?";
}

uint64_t LinearPart::slice_bytes(BackendKind backend, int64_t begin, int64_t end) const {
  if (end <= begin) return 0;
  const int64_t n = end - begin;
  const int64_t other = split_columns ? in_features : out_features;
  const uint64_t col_bias = split_columns && has_bias ? u64(n) : 0;  // elements, F32 on both backends
  if (backend == BackendKind::kCpu) return 4 * (u64(other) * u64(n) + col_bias);
  if (!exl3) return 2 * u64(other) * u64(n) + 4 * col_bias;  // F16 [out, in] for cuBLAS
  // Stored EXL3 slice: boundaries are 128-aligned; the slice that ends the dimension runs to the
  // padded size. Trellis tiles are 16x16 with trellis_words int16 each.
  const int64_t padded = (end == split_extent() ? pad128(end) : end) - begin;
  const uint64_t trellis = u64(pad128(other) / 16) * u64(padded / 16) * u64(trellis_words) * 2;
  const uint64_t scale = 2 * u64(padded);  // svh slice (column split) or suh slice (row split), fp16
  return trellis + scale + 4 * col_bias;
}

uint64_t LinearPart::holder_bytes(BackendKind backend) const {
  if (backend == BackendKind::kCpu || !exl3) return 0;
  const int64_t other = split_columns ? in_features : out_features;
  return 2 * u64(pad128(other));
}

uint64_t LinearPart::first_holder_bytes(BackendKind) const {
  if (split_columns || !has_bias) return 0;
  return 4 * u64(out_features);
}

int64_t ComponentFootprint::feature(int64_t u) const { return std::min(u * unit_size, extent); }

uint64_t ComponentFootprint::weight_bytes(int64_t begin, int64_t end) const {
  if (end <= begin) return 0;
  uint64_t bytes = holder_bytes;
  for (const LinearPart& p : linears) {
    const int64_t a = std::min(begin * p.features_per_unit, p.split_extent());
    const int64_t b = std::min(end * p.features_per_unit, p.split_extent());
    bytes += p.slice_bytes(backend, a, b) + p.holder_bytes(backend);
    if (begin == 0) bytes += p.first_holder_bytes(backend);
  }
  return bytes;
}

uint64_t ComponentFootprint::cache_token_bytes(int64_t kv_heads) const {
  const int64_t dim = kv_heads * cache_head_dim;
  return kv_token_bytes(dim, cache_bits.k, cache_element_bytes) +
         kv_token_bytes(dim, cache_bits.v, cache_element_bytes);
}

uint64_t ComponentFootprint::cache_bytes(int64_t begin, int64_t end, int64_t tokens) const {
  if (end <= begin || tokens <= 0) return 0;
  return u64(tokens) * cache_token_bytes(feature(end) - feature(begin));
}

uint64_t WorkspaceFootprint::bytes(int64_t step_tokens, int64_t context) const {
  const uint64_t t = u64(std::max<int64_t>(step_tokens, 0)), c = u64(std::max<int64_t>(context, 0));
  return t * per_token + t * c * per_token_context + c * per_context;
}

absl::Status ModelFootprint::set_cache_bits(const KvCacheBits& bits) {
  EXL3_RETURN_IF_ERROR(validate_kv_cache_bits(bits, "--cache-bits"));
  for (LayerFootprint& l : layers) {
    EXL3_RETURN_IF_ERROR(check_kv_token_dim(l.attention.unit_size * l.attention.cache_head_dim, bits));
    l.attention.cache_bits = bits;
  }
  cache_bits = bits;
  return absl::OkStatus();
}

uint64_t ModelFootprint::replicated_bytes() const {
  uint64_t bytes = embedding_bytes + final_norm_bytes;
  for (const LayerFootprint& l : layers) bytes += l.norm_bytes;
  return bytes;
}

uint64_t ModelFootprint::layer_weight_bytes(int64_t layer) const {
  const LayerFootprint& l = layers.at(layer);
  return l.attention.weight_bytes(0, l.attention.units) + l.mlp.weight_bytes(0, l.mlp.units) + l.norm_bytes;
}

uint64_t ModelFootprint::layer_cache_bytes(int64_t layer, int64_t tokens) const {
  const ComponentFootprint& a = layers.at(layer).attention;
  return a.cache_bytes(0, a.units, tokens);
}

uint64_t ModelFootprint::head_weight_bytes() const { return head.weight_bytes(0, head.units) + final_norm_bytes; }

uint64_t ModelFootprint::total_weight_bytes() const {
  uint64_t bytes = embedding_bytes + head_weight_bytes();
  for (int64_t l = 0; l < static_cast<int64_t>(layers.size()); ++l) bytes += layer_weight_bytes(l);
  return bytes;
}

uint64_t ModelFootprint::total_cache_bytes(int64_t tokens) const {
  uint64_t bytes = 0;
  for (int64_t l = 0; l < static_cast<int64_t>(layers.size()); ++l) bytes += layer_cache_bytes(l, tokens);
  return bytes;
}

int64_t kv_heads_per_unit(const ModelConfig& c) {
  const int64_t w = kSplitAlign / std::gcd(c.head_dim, kSplitAlign);
  return c.num_kv_heads % w == 0 ? w : c.num_kv_heads;
}

absl::StatusOr<ModelFootprint> build_model_footprint(const ModelConfig& c, BackendKind backend,
                                                     const SafetensorsCollection* tensors) {
  if (c.num_layers <= 0 || c.hidden_size <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 ||
      c.intermediate_size <= 0 || c.vocab_size <= 0) {
    return absl::InvalidArgumentError("model config has a non-positive dimension");
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.num_heads, " query heads are not a multiple of ", c.num_kv_heads, " KV heads"));
  }
  if (backend == BackendKind::kCuda && tensors == nullptr) {
    return absl::InvalidArgumentError("the cuda footprint counts stored bytes and needs the safetensors headers");
  }

  ModelFootprint fp;
  fp.config = c;
  fp.backend = backend;
  const int64_t group = c.num_heads / c.num_kv_heads;
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  const int64_t w = kv_heads_per_unit(c);
  if (w == c.num_kv_heads && c.num_kv_heads > 1 && (w * c.head_dim) % kSplitAlign != 0) {
    fp.notes.push_back(absl::StrCat("attention is not split: head_dim ", c.head_dim, " needs groups of ",
                                    kSplitAlign / std::gcd(c.head_dim, kSplitAlign),
                                    " KV heads to fall on 128-feature boundaries, which does not divide ",
                                    c.num_kv_heads, " KV heads; one rank holds all of each layer's attention"));
  }
  if (c.intermediate_size % kSplitAlign != 0) {
    fp.notes.push_back(absl::StrCat("the last MLP unit holds ", c.intermediate_size % kSplitAlign,
                                    " of 128 columns (intermediate_size ", c.intermediate_size, ")"));
  }
  const uint64_t cache_elem = backend == BackendKind::kCpu ? 4 : 2;
  const bool assume_qkv_bias = c.architecture == Architecture::kQwen2;

  EXL3_ASSIGN_OR_RETURN(const uint64_t embedding, embedding_table_bytes(c, backend, tensors));
  (backend == BackendKind::kCpu ? fp.embedding_bytes : fp.embedding_host_bytes) = embedding;

  double bits_weighted = 0.0, bits_weights = 0.0;
  auto finish_part = [&](LinearPart& part, bool bias_default) -> absl::Status {
    if (tensors == nullptr) {
      part.has_bias = bias_default;
      return absl::OkStatus();
    }
    return read_linear_storage(*tensors, part);
  };

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    LayerFootprint layer;

    ComponentFootprint& a = layer.attention;
    a.kind = ComponentKind::kAttention;
    a.layer = l;
    a.backend = backend;
    a.unit_size = w;
    a.extent = c.num_kv_heads;
    a.units = c.num_kv_heads / w;
    a.cache_head_dim = c.head_dim;
    a.cache_element_bytes = cache_elem;
    a.linears = {make_part(p + "self_attn.q_proj", c.hidden_size, q_dim, true, group * w * c.head_dim),
                 make_part(p + "self_attn.k_proj", c.hidden_size, kv_dim, true, w * c.head_dim),
                 make_part(p + "self_attn.v_proj", c.hidden_size, kv_dim, true, w * c.head_dim),
                 make_part(p + "self_attn.o_proj", q_dim, c.hidden_size, false, group * w * c.head_dim)};
    for (size_t i = 0; i < a.linears.size(); ++i) {
      EXL3_RETURN_IF_ERROR(finish_part(a.linears[i], assume_qkv_bias && i < 3));
    }

    ComponentFootprint& m = layer.mlp;
    m.kind = ComponentKind::kMlp;
    m.layer = l;
    m.backend = backend;
    m.unit_size = kSplitAlign;
    m.extent = c.intermediate_size;
    m.units = ceil_div(c.intermediate_size, kSplitAlign);
    m.linears = {make_part(p + "mlp.gate_proj", c.hidden_size, c.intermediate_size, true, kSplitAlign),
                 make_part(p + "mlp.up_proj", c.hidden_size, c.intermediate_size, true, kSplitAlign),
                 make_part(p + "mlp.down_proj", c.intermediate_size, c.hidden_size, false, kSplitAlign)};
    for (LinearPart& part : m.linears) EXL3_RETURN_IF_ERROR(finish_part(part, false));

    for (const ComponentFootprint* comp : {&layer.attention, &layer.mlp}) {
      for (const LinearPart& part : comp->linears) {
        if (!part.exl3) continue;
        const double numel =
            static_cast<double>(pad128(part.in_features)) * static_cast<double>(pad128(part.out_features));
        bits_weighted += part.bits() * numel;
        bits_weights += numel;
      }
    }

    for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
      EXL3_ASSIGN_OR_RETURN(const uint64_t b, vector_bytes(tensors, p + norm, c.hidden_size));
      layer.norm_bytes += b;
    }
    if (c.qk_norm) {
      for (const char* norm : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) {
        EXL3_ASSIGN_OR_RETURN(const uint64_t b, vector_bytes(tensors, p + norm, c.head_dim));
        layer.attention.holder_bytes += b;
      }
    }
    fp.layers.push_back(std::move(layer));
  }
  fp.decoder_bits = bits_weights > 0 ? bits_weighted / bits_weights : 0.0;

  EXL3_ASSIGN_OR_RETURN(fp.final_norm_bytes, vector_bytes(tensors, "model.norm.weight", c.hidden_size));

  ComponentFootprint& h = fp.head;
  h.kind = ComponentKind::kHead;
  h.layer = -1;
  h.backend = backend;
  h.unit_size = kSplitAlign;
  h.extent = c.vocab_size;
  h.units = ceil_div(c.vocab_size, kSplitAlign);
  LinearPart head = make_part("lm_head", c.hidden_size, c.vocab_size, true, kSplitAlign);
  const bool head_stored =
      tensors != nullptr ? (tensors->has("lm_head.trellis") || tensors->has("lm_head.weight")) : !c.tie_word_embeddings;
  if (head_stored) {
    EXL3_RETURN_IF_ERROR(finish_part(head, false));
  } else if (c.tie_word_embeddings) {
    // The worker builds a dense head from the embedding table (worker/model/llama_model.cpp).
    fp.head_from_embedding = true;
    head.prefix = "model.embed_tokens";
    if (tensors != nullptr) head.dense_dtype_size = dtype_size(tensors->find("model.embed_tokens.weight")->dtype);
  } else {
    return absl::NotFoundError(
        "missing tensor \"lm_head.weight\" (and no EXL3 \"lm_head.trellis\"; "
        "tie_word_embeddings is false)");
  }
  fp.head_bits = head.bits();
  h.linears = {head};

  if (backend == BackendKind::kCpu) {
    const uint64_t act = 4 * u64(c.hidden_size) + 2 * u64(q_dim) + 2 * u64(kv_dim) + 3 * u64(c.intermediate_size);
    fp.workspace.per_token = 4 * (act + u64(c.vocab_size));
    fp.workspace.per_token_context = 4;
    fp.workspace.per_context = 8 * u64(c.head_dim);
  }
  return fp;
}

// ---- CUDA worker mirrors ---------------------------------------------------------------------------

namespace {

constexpr uint64_t kWorkspaceAlign = 256;  // Workspace::aligned (worker/model/workspace.h)

uint64_t align_workspace(uint64_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

}  // namespace

uint64_t forward_workspace_bytes(const ModelConfig& c, const RankShape& rank, const StepShape& step,
                                 uint64_t activation_bytes) {
  const uint64_t a = activation_bytes;
  const uint64_t n = u64(step.tokens), r = u64(step.logit_rows), h = u64(c.hidden_size), hd = u64(c.head_dim);
  const uint64_t kv = u64(rank.kv_heads), heads = kv * u64(c.num_heads / c.num_kv_heads), mlp = u64(rank.mlp_columns);
  const uint64_t local_vocab = rank.has_head ? u64(rank.vocab_rows) : 0;
  // In take_buffers' order: step metadata, layer activations, head buffers (gathered and packed
  // logits in tp), width exchange.
  const uint64_t sizes[] = {4 * n,         4 * n,          4 * n,          4 * u64(step.seqs) * u64(step.pages_per_seq),
                            4 * r,         4 * n * h,      a * n * h,      a * n * heads * hd,
                            a * n * kv * hd, a * n * kv * hd, a * n * heads * hd, 4 * n * h,
                            a * n * mlp,   a * n * mlp,    a * n * mlp,    4 * r * h,
                            a * r * h,     4 * r * local_vocab, rank.gathers_logits ? 4 * r * u64(c.vocab_size) : 0,
                            rank.gathers_logits ? 4 * r * u64(c.vocab_size) : 0,  // gathered logits re-packed
                            4,             4 * u64(rank.world_size)};
  uint64_t total = 0;
  for (uint64_t s : sizes) total += align_workspace(s);
  return std::max(total, kWorkspaceAlign);  // Workspace::create allocates at least one alignment unit
}

int64_t widest_padded_features(const ModelConfig& c, const RankShape& rank) {
  const int64_t heads = rank.kv_heads * (c.num_heads / c.num_kv_heads);
  int64_t widest = std::max({c.hidden_size, heads * c.head_dim, rank.mlp_columns});
  if (rank.has_head) widest = std::max(widest, rank.vocab_rows);
  return pad128(widest);
}

uint64_t cuda_scratch_bytes(int64_t rows, int64_t features) {
  const uint64_t linear = u64(rows) * u64(features) * (2 + 4);  // F16 and F32 [rows, features]
  const int64_t floats = attention_scratch::reserve_floats(rows, features);
  // The fp16 staging of decoded EXL3 weight rows for long prefills (kDequantChunkBytes in
  // kernels/cuda/cuda_backend.cpp).
  constexpr uint64_t kDequantStagingBytes = uint64_t{64} << 20;
  return linear + 4 * u64(floats) + kDequantStagingBytes;
}

uint64_t cuda_sampler_bytes(int64_t rows, int64_t vocab, int64_t history_tokens) {
  auto align256 = [](uint64_t b) { return (b + 255) / 256 * 256; };
  const uint64_t chunks = (u64(vocab) + 31) / 32;
  constexpr uint64_t kRangeBestBytes = 64 * 16;  // the sampler's first kernel: 64 ranges a row
  const uint64_t row_scratch = align256(4 * u64(vocab)) + align256(4 * chunks) + align256(8 * chunks) +
                               align256(4 * chunks) + align256(kRangeBestBytes);
  constexpr uint64_t kDeviceSampleRowBytes = 88;
  constexpr uint64_t kLogprobFloats = 41;  // the engine's F32 [rows, kLogprobWidth] logprob rows
  return u64(rows) * kDeviceSampleRowBytes + 4 * u64(std::max<int64_t>(history_tokens, 1)) + u64(rows) * row_scratch +
         4 * u64(rows) + 4 * kLogprobFloats * u64(rows);
}

CudaRankReserve cuda_rank_reserve(const ModelConfig& c, const RankShape& rank, const StepShape& step) {
  CudaRankReserve r;
  r.workspace = forward_workspace_bytes(c, rank, step, 2);
  r.scratch = cuda_scratch_bytes(step.tokens, widest_padded_features(c, rank));
  r.engine = 4 * u64(c.rotary_dim() / 2) + 4 * u64(step.seqs);
  // The engine samples max(seqs, logit_rows) rows of the whole vocabulary over every cached token.
  r.sampler = cuda_sampler_bytes(std::max(step.seqs, step.logit_rows), c.vocab_size, step.pages_per_seq * step.page_size);
  r.allocator_fixed = kCudaOverheads.cublas_workspace_bytes + kCudaOverheads.bookkeeping_bytes;
  r.context = kCudaOverheads.context_bytes;
  r.nccl = rank.world_size > 1 ? kCudaOverheads.nccl_bytes : 0;
  return r;
}

uint64_t cuda_oneshot_all_reduce_bytes(int world_size, int64_t max_bytes) {
  if (world_size < 2 || max_bytes <= 0) return 0;
  constexpr uint64_t kGranule = uint64_t{2} << 20;
  const auto granules = [](uint64_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; };
  return granules(static_cast<uint64_t>(oneshot::buffer_bytes(world_size, max_bytes))) +
         granules(sizeof(oneshot::State));
}

RankShape widest_rank_shape(const ModelConfig& c, bool tensor_parallel, int world_size) {
  RankShape r;
  r.kv_heads = c.num_kv_heads;
  r.mlp_columns = c.intermediate_size;
  r.vocab_rows = c.vocab_size;
  r.has_head = true;
  r.gathers_logits = tensor_parallel && world_size > 1;
  r.world_size = world_size;
  return r;
}

}  // namespace exl3
