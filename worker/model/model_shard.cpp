// ModelShard construction and validation.
#include "worker/model/model_shard.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

ModelShard ModelShard::full(const ModelConfig& c) {
  ModelShard s;
  s.first_layer = 0;
  s.end_layer = c.num_layers;
  for (int64_t l = 0; l < c.num_layers; ++l) s.layers.push_back({0, c.num_kv_heads, 0, c.intermediate_size});
  s.vocab_begin = 0;
  s.vocab_end = c.vocab_size;
  return s;
}

absl::Status ModelShard::validate(const ModelConfig& c) const {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("shard of rank ", rank, ": ", what));
  };
  if (first_layer < 0 || end_layer > c.num_layers || first_layer > end_layer) {
    return bad(absl::StrCat("layers [", first_layer, ", ", end_layer, ") outside [0, ", c.num_layers, ")"));
  }
  if (static_cast<int64_t>(layers.size()) != end_layer - first_layer) {
    return bad(absl::StrCat(layers.size(), " layer slices for ", end_layer - first_layer, " layers"));
  }
  const int64_t group = c.num_heads / c.num_kv_heads;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSlice& s = layers[i];
    const int64_t layer = first_layer + static_cast<int64_t>(i);
    if (s.kv_head_begin < 0 || s.kv_head_end > c.num_kv_heads || s.kv_head_begin > s.kv_head_end) {
      return bad(absl::StrCat("layer ", layer, " KV heads [", s.kv_head_begin, ", ", s.kv_head_end, ") outside [0, ",
                              c.num_kv_heads, ")"));
    }
    const bool whole_heads = s.kv_head_begin == 0 && s.kv_head_end == c.num_kv_heads;
    if (!whole_heads && s.kv_head_end > s.kv_head_begin &&
        ((s.kv_head_begin * c.head_dim) % 128 != 0 || (s.kv_head_end != c.num_kv_heads && (s.kv_head_end * c.head_dim) % 128 != 0) ||
         (s.kv_head_begin * c.head_dim * group) % 128 != 0)) {
      return bad(absl::StrCat("layer ", layer, " KV heads [", s.kv_head_begin, ", ", s.kv_head_end,
                              ") do not fall on 128-feature boundaries"));
    }
    if (s.mlp_begin < 0 || s.mlp_end > c.intermediate_size || s.mlp_begin > s.mlp_end) {
      return bad(absl::StrCat("layer ", layer, " MLP columns [", s.mlp_begin, ", ", s.mlp_end, ") outside [0, ",
                              c.intermediate_size, ")"));
    }
    if (s.mlp_end > s.mlp_begin && (s.mlp_begin % 128 != 0 || (s.mlp_end % 128 != 0 && s.mlp_end != c.intermediate_size))) {
      return bad(absl::StrCat("layer ", layer, " MLP columns [", s.mlp_begin, ", ", s.mlp_end,
                              ") are not multiples of 128"));
    }
  }
  if (vocab_begin < 0 || vocab_end > c.vocab_size || vocab_begin > vocab_end) {
    return bad(absl::StrCat("vocab rows [", vocab_begin, ", ", vocab_end, ") outside [0, ", c.vocab_size, ")"));
  }
  if (vocab_end > vocab_begin && (vocab_begin % 128 != 0 || (vocab_end % 128 != 0 && vocab_end != c.vocab_size))) {
    return bad(absl::StrCat("vocab rows [", vocab_begin, ", ", vocab_end, ") are not multiples of 128"));
  }
  return absl::OkStatus();
}

}  // namespace exl3
