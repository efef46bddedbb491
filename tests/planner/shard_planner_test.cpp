// Tests of the shard planner (coordinator/planner/shard_planner.h) over 1-8 ranks, both modes,
// and four kinds of caps: even, uneven (1:3), zero-share and impossible. Every plan is checked
// against invariants computed here independently of the planner:
//   - coverage: every KV head, MLP column and vocab row of every layer is held by exactly one rank
//     (tp), every layer by exactly one rank (layers), with 128-feature aligned boundaries;
//   - caps: each rank's bytes, re-derived from its ranges with hand-written fp32 formulas (the CPU
//     worker's allocations), never exceed its cap, and match what the plan says;
//   - proportion: with caps that leave room for rounding, each rank gets the largest-remainder
//     share of every component type exactly, i.e. within one unit of units * room / total room
//     (tp), and layer boundaries land within one layer (plus the head) of the proportional byte
//     target (layers);
//   - errors: RESOURCE_EXHAUSTED naming the rank and an amount that, added to that cap, makes the
//     plan feasible, or the total the model needs and the caps' total.
#include "coordinator/planner/shard_planner.h"

#include <cmath>
#include <cstdio>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/test_paths.h"
#include "coordinator/planner/byte_units.h"
#include "gtest/gtest.h"
#include "planner/llama_shapes.h"

namespace exl3 {
namespace {

// A Llama config of these dimensions (llama_shapes.h) named `name`, with the default 8192 positions.
ModelConfig llama(std::string name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim,
                  int64_t intermediate, int64_t vocab) {
  ModelConfig c = testing::llama_config(layers, hidden, heads, kv_heads, head_dim, intermediate, vocab,
                                        ModelConfig{}.max_position_embeddings);
  c.architecture_name = std::move(name);
  return c;
}

struct Case {
  std::string name;
  ModelConfig config;
  PlannerOptions options;  // caps and mode are filled per test
};

// The matrix asks for exactly max_batch full-length sequences of cache (as --cache-tokens would),
// so tight caps are refused rather than given a smaller cache (that fit: kv_cache_fit_test.cpp).
void exact_cache(PlannerOptions& o) { o.requested_cache_tokens = o.max_batch * o.sequence_pages() * o.page_size; }

std::vector<Case> models() {
  std::vector<Case> cases;
  PlannerOptions big;
  big.max_seq_len = 8192;
  big.max_batch = 2;
  big.page_size = 256;
  big.step_tokens = 512;
  exact_cache(big);
  cases.push_back({"llama3-8b", llama("llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256), big});
  cases.push_back({"llama3-70b", llama("llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256), big});
  // Partial last units everywhere (1000 columns, 32001 rows), 2-head attention units, Qwen2 biases.
  ModelConfig odd = llama("odd", 6, 512, 8, 4, 64, 1000, 32001);
  odd.architecture = Architecture::kQwen2;
  PlannerOptions small;
  small.max_seq_len = 1000;  // not a multiple of the page size: 4 pages per sequence
  small.max_batch = 3;
  small.page_size = 256;
  small.step_tokens = 64;
  exact_cache(small);
  cases.push_back({"odd", odd, small});
  auto fixture = load_model_config(testing::source_path("models/exl3-4.0bpw"));
  EXPECT_TRUE(fixture.ok()) << fixture.status();
  if (fixture.ok()) cases.push_back({"fixture-exl3-4.0bpw", *fixture, small});
  return cases;
}

// ---- Independent pricing (fp32, as the CPU worker allocates) --------------------------------------

struct Priced {
  uint64_t weights = 0, cache = 0, workspace = 0;
};

Priced price_by_hand(const ModelConfig& c, const PlannerOptions& o, const RankPlan& p) {
  const uint64_t h = c.hidden_size, hd = c.head_dim, g = c.num_heads / c.num_kv_heads;
  const bool bias = c.architecture == Architecture::kQwen2;
  const uint64_t tokens = o.max_batch * ((o.max_seq_len + o.page_size - 1) / o.page_size) * o.page_size;
  Priced out;
  if (p.has_embedding) out.weights += 4 * c.vocab_size * h;
  for (const LayerPlan& l : p.layers) {
    const uint64_t kv = l.kv_head_end - l.kv_head_begin, q_cols = kv * g * hd, kv_cols = kv * hd;
    const uint64_t mlp = l.mlp_end - l.mlp_begin;
    out.weights += 4 * (2 * h);                                      // norms
    out.weights += 4 * (h * q_cols + 2 * h * kv_cols + q_cols * h);  // q, k, v, o
    if (bias) out.weights += 4 * (q_cols + 2 * kv_cols);
    out.weights += 4 * (3 * h * mlp);  // gate, up, down
    out.cache += tokens * kv * 2 * hd * 4;
  }
  if (p.has_head) out.weights += 4 * (h + h * (p.vocab_end - p.vocab_begin));
  const bool holds = p.has_embedding || p.has_head || !p.layers.empty();
  if (holds) {
    const uint64_t t = o.step_tokens, ctx = o.max_seq_len;
    const uint64_t per_token =
        4 * (4 * h + 2 * c.num_heads * hd + 2 * c.num_kv_heads * hd + 3 * c.intermediate_size + c.vocab_size);
    out.workspace = t * per_token + t * ctx * 4 + ctx * 8 * hd;
  }
  return out;
}

// Bytes every tp rank holds whatever its share: embedding, norms, workspace.
uint64_t tp_base(const ModelConfig& c, const PlannerOptions& o) {
  RankPlan empty;
  empty.has_embedding = true;
  empty.has_head = true;
  const Priced p = price_by_hand(c, o, empty);
  return p.weights + p.workspace + 4 * 2 * c.hidden_size * c.num_layers;
}

// The whole model on one rank (weights, cache, workspace).
Priced whole_model(const ModelConfig& c, const PlannerOptions& o) {
  RankPlan all;
  all.has_embedding = all.has_head = true;
  all.vocab_end = c.vocab_size;
  for (int64_t l = 0; l < c.num_layers; ++l) all.layers.push_back({l, 0, c.num_kv_heads, 0, c.intermediate_size});
  return price_by_hand(c, o, all);
}

// ---- Invariants ----------------------------------------------------------------------------------

bool aligned(int64_t v, int64_t extent, int64_t features_per_item) {
  return v == extent || (v * features_per_item) % 128 == 0;
}

// `fp32_priced`: the plan's bytes are checked against the hand-written fp32 formulas (CPU backend);
// otherwise only against the caps.
void check_plan(const Case& k, const PlannerOptions& o, const std::vector<RankPlan>& plans, bool fp32_priced = true) {
  const ModelConfig& c = k.config;
  const int world = static_cast<int>(o.caps.size());
  ASSERT_EQ(static_cast<int>(plans.size()), world);
  const bool whole_attention = kv_heads_per_unit(c) == c.num_kv_heads;
  for (int r = 0; r < world; ++r) {
    const RankPlan& p = plans[r];
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.world_size, world);
    EXPECT_EQ(p.mode, o.mode);
    ASSERT_EQ(static_cast<int64_t>(p.layers.size()), p.end_layer - p.first_layer);
    for (size_t i = 0; i < p.layers.size(); ++i) EXPECT_EQ(p.layers[i].layer, p.first_layer + static_cast<int64_t>(i));
    EXPECT_LE(p.weight_bytes + p.cache_bytes + p.workspace_bytes, o.caps[r]) << "cap exceeded";
    if (fp32_priced) {
      const Priced priced = price_by_hand(c, o, p);
      EXPECT_EQ(p.weight_bytes, priced.weights);
      EXPECT_EQ(p.cache_bytes, priced.cache);
      EXPECT_EQ(p.workspace_bytes, priced.workspace);
      EXPECT_LE(priced.weights + priced.cache + priced.workspace, o.caps[r]) << "cap exceeded";
    }
    EXPECT_EQ(p.num_pages * p.page_size, o.max_batch * ((o.max_seq_len + o.page_size - 1) / o.page_size) * o.page_size);
  }

  if (o.mode == PlanMode::kTensorParallel) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      int64_t kv = 0, mlp = 0;
      for (int r = 0; r < world; ++r) {
        const RankPlan& p = plans[r];
        ASSERT_EQ(p.first_layer, 0);
        ASSERT_EQ(p.end_layer, c.num_layers);
        const LayerPlan& lp = p.layers[l];
        ASSERT_EQ(lp.kv_head_begin, kv) << "layer " << l << " rank " << r << ": KV heads not contiguous";
        ASSERT_LE(lp.kv_head_begin, lp.kv_head_end);
        ASSERT_EQ(lp.mlp_begin, mlp) << "layer " << l << " rank " << r << ": MLP columns not contiguous";
        ASSERT_LE(lp.mlp_begin, lp.mlp_end);
        if (!whole_attention) {
          EXPECT_TRUE(aligned(lp.kv_head_end, c.num_kv_heads, c.head_dim)) << lp.kv_head_end;
          EXPECT_TRUE(aligned(lp.kv_head_end, c.num_kv_heads, c.head_dim * (c.num_heads / c.num_kv_heads)));
        } else {
          EXPECT_TRUE(lp.kv_head_end == lp.kv_head_begin ||
                      (lp.kv_head_begin == 0 && lp.kv_head_end == c.num_kv_heads));
        }
        EXPECT_TRUE(aligned(lp.mlp_end, c.intermediate_size, 1)) << lp.mlp_end;
        kv = lp.kv_head_end;
        mlp = lp.mlp_end;
      }
      ASSERT_EQ(kv, c.num_kv_heads) << "layer " << l << ": KV heads not all covered";
      ASSERT_EQ(mlp, c.intermediate_size) << "layer " << l << ": MLP columns not all covered";
    }
    int64_t vocab = 0;
    for (const RankPlan& p : plans) {
      EXPECT_TRUE(p.has_embedding && p.has_head);
      ASSERT_EQ(p.vocab_begin, vocab);
      ASSERT_LE(p.vocab_begin, p.vocab_end);
      EXPECT_TRUE(aligned(p.vocab_end, c.vocab_size, 1));
      vocab = p.vocab_end;
    }
    ASSERT_EQ(vocab, c.vocab_size);
  } else {
    int64_t next = 0;
    int embedders = 0, heads = 0;
    for (const RankPlan& p : plans) {
      ASSERT_EQ(p.first_layer, next) << "rank " << p.rank << ": layers not contiguous";
      ASSERT_LE(p.first_layer, p.end_layer);
      next = p.end_layer;
      for (const LayerPlan& lp : p.layers) {
        EXPECT_EQ(lp.kv_head_begin, 0);
        EXPECT_EQ(lp.kv_head_end, c.num_kv_heads);
        EXPECT_EQ(lp.mlp_begin, 0);
        EXPECT_EQ(lp.mlp_end, c.intermediate_size);
      }
      if (p.has_embedding) {
        ++embedders;
        EXPECT_EQ(p.first_layer, 0);
        EXPECT_LT(p.first_layer, p.end_layer);
      }
      if (p.has_head) {
        ++heads;
        EXPECT_EQ(p.end_layer, c.num_layers);
        EXPECT_LT(p.first_layer, p.end_layer);
        EXPECT_EQ(p.vocab_begin, 0);
        EXPECT_EQ(p.vocab_end, c.vocab_size);
      } else {
        EXPECT_EQ(p.vocab_end, p.vocab_begin);
      }
    }
    EXPECT_EQ(next, c.num_layers);
    EXPECT_EQ(embedders, 1);
    EXPECT_EQ(heads, 1);
  }
}

// Largest-remainder shares of `units` in proportion to `rooms` (ties to the lower rank).
std::vector<int64_t> largest_remainder(int64_t units, const std::vector<uint64_t>& rooms) {
  long double total = 0;
  for (uint64_t r : rooms) total += r;
  std::vector<int64_t> counts(rooms.size());
  std::vector<std::pair<long double, size_t>> rest;
  int64_t given = 0;
  for (size_t r = 0; r < rooms.size(); ++r) {
    const long double ideal = units * static_cast<long double>(rooms[r]) / total;
    counts[r] = static_cast<int64_t>(std::floor(ideal));
    given += counts[r];
    rest.push_back({ideal - counts[r], r});
  }
  std::stable_sort(rest.begin(), rest.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < units; ++i, ++given) ++counts[rest[i].second];
  return counts;
}

// Caps giving rank r a share weight[r] of what the model needs, with `slack` headroom for
// rounding: tp needs base on every rank plus the sharded rest; layers needs the workspace on each.
std::vector<uint64_t> caps_for(const Case& k, PlanMode mode, const std::vector<double>& weight, double slack,
                               uint64_t extra_per_rank) {
  const Priced whole = whole_model(k.config, k.options);
  const uint64_t base = mode == PlanMode::kTensorParallel ? tp_base(k.config, k.options) : whole.workspace;
  const uint64_t shardable =
      whole.weights + whole.cache - (mode == PlanMode::kTensorParallel ? base - whole.workspace : 0);
  double sum = 0;
  for (double w : weight) sum += w;
  std::vector<uint64_t> caps;
  for (double w : weight) {
    caps.push_back(
        w == 0 ? 0 : base + static_cast<uint64_t>(static_cast<double>(shardable) * w / sum * slack) + extra_per_rank);
  }
  return caps;
}

// Headroom that absorbs any rounding: one unit of every component on every rank (tp), one layer
// plus the head and embedding (layers).
uint64_t rounding_headroom(const Case& k, PlanMode mode) {
  auto fp = build_model_footprint(k.config, BackendKind::kCpu);
  EXPECT_TRUE(fp.ok());
  const int64_t tokens = k.options.cache_tokens();
  if (mode == PlanMode::kLayers) {
    return fp->layer_weight_bytes(0) + fp->layer_cache_bytes(0, tokens) + fp->head_weight_bytes() + fp->embedding_bytes;
  }
  const ComponentFootprint& a = fp->layers[0].attention;
  const ComponentFootprint& m = fp->layers[0].mlp;
  return k.config.num_layers * (a.unit_weight_bytes() + a.cache_bytes(0, 1, tokens) + m.unit_weight_bytes()) +
         fp->head.unit_weight_bytes();
}

std::vector<double> even(int n) { return std::vector<double>(n, 1.0); }
std::vector<double> one_to_three(int n) {
  std::vector<double> w;
  for (int r = 0; r < n; ++r) w.push_back(r % 2 == 0 ? 1.0 : 3.0);
  return w;
}

absl::StatusOr<std::vector<RankPlan>> plan(const Case& k, PlanMode mode, const std::vector<uint64_t>& caps) {
  auto fp = build_model_footprint(k.config, BackendKind::kCpu);
  if (!fp.ok()) return fp.status();
  PlannerOptions o = k.options;
  o.mode = mode;
  o.caps = caps;
  return plan_shards(*fp, o);
}

PlannerOptions with(const Case& k, PlanMode mode, const std::vector<uint64_t>& caps) {
  PlannerOptions o = k.options;
  o.mode = mode;
  o.caps = caps;
  return o;
}

// tp: each component type's counts equal the largest-remainder shares of the rooms, in every layer.
void check_tp_proportional(const Case& k, const std::vector<uint64_t>& caps, const std::vector<RankPlan>& plans) {
  auto fp = build_model_footprint(k.config, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok());
  const uint64_t base = tp_base(k.config, k.options);
  std::vector<uint64_t> rooms;
  for (uint64_t cap : caps) rooms.push_back(cap - base);
  const auto attention = largest_remainder(fp->layers[0].attention.units, rooms);
  const auto mlp = largest_remainder(fp->layers[0].mlp.units, rooms);
  const auto head = largest_remainder(fp->head.units, rooms);
  const int64_t w = fp->layers[0].attention.unit_size;
  for (size_t r = 0; r < plans.size(); ++r) {
    for (const LayerPlan& l : plans[r].layers) {
      EXPECT_EQ(l.kv_head_end - l.kv_head_begin,
                std::min<int64_t>(attention[r] * w, k.config.num_kv_heads - l.kv_head_begin))
          << "rank " << r << " layer " << l.layer;
      EXPECT_EQ((l.mlp_end - l.mlp_begin + 127) / 128, mlp[r]) << "rank " << r << " layer " << l.layer;
    }
    EXPECT_EQ((plans[r].vocab_end - plans[r].vocab_begin + 127) / 128, head[r]) << "rank " << r;
  }
}

// layers: every boundary within one layer (plus the head at the end) of the proportional target.
void check_layers_proportional(const Case& k, const std::vector<uint64_t>& caps, const std::vector<RankPlan>& plans) {
  auto fp = build_model_footprint(k.config, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok());
  const int64_t tokens = k.options.cache_tokens();
  const uint64_t ws = whole_model(k.config, k.options).workspace;
  const Priced whole = whole_model(k.config, k.options);
  const long double model = static_cast<long double>(whole.weights + whole.cache);
  long double room_total = 0, room_prefix = 0;
  for (uint64_t cap : caps) room_total += cap > ws ? cap - ws : 0;
  const long double tolerance = fp->layer_weight_bytes(0) + fp->layer_cache_bytes(0, tokens) + fp->head_weight_bytes();
  long double held = 0;
  for (size_t r = 0; r < plans.size(); ++r) {
    room_prefix += caps[r] > ws ? caps[r] - ws : 0;
    held += plans[r].weight_bytes + plans[r].cache_bytes;
    EXPECT_LE(std::fabs(static_cast<double>(held - model * room_prefix / room_total)), static_cast<double>(tolerance))
        << "rank " << r << " boundary at layer " << plans[r].end_layer;
  }
}

// Parses "rank R needs X.YZ GiB|MiB more" and returns (R, bytes rounded up to cover the rounding).
std::pair<int, uint64_t> parse_shortfall(const std::string& message) {
  std::smatch m;
  if (!std::regex_search(message, m, std::regex("rank (\\d+) needs ([0-9.]+) (GiB|MiB) more"))) return {-1, 0};
  const double unit = m[3] == "GiB" ? static_cast<double>(kGiB) : static_cast<double>(kMiB);
  return {std::stoi(m[1]), static_cast<uint64_t>(std::ceil((std::stod(m[2]) + 0.005) * unit))};
}

class PlannerMatrix : public ::testing::TestWithParam<PlanMode> {};

TEST_P(PlannerMatrix, EvenAndUnevenCapsWithRoomForRounding) {
  const PlanMode mode = GetParam();
  for (const Case& k : models()) {
    for (int n = 1; n <= 8; ++n) {
      for (const bool uneven : {false, true}) {
        SCOPED_TRACE(::testing::Message() << k.name << ", " << n << " ranks, " << (uneven ? "1:3" : "even"));
        const auto weights = uneven ? one_to_three(n) : even(n);
        const auto caps = caps_for(k, mode, weights, 1.0, rounding_headroom(k, mode));
        auto plans = plan(k, mode, caps);
        ASSERT_TRUE(plans.ok()) << plans.status();
        check_plan(k, with(k, mode, caps), *plans);
        if (mode == PlanMode::kTensorParallel) {
          check_tp_proportional(k, caps, *plans);
        } else {
          check_layers_proportional(k, caps, *plans);
        }
      }
    }
  }
}

// Caps with only 3% slack over the proportional share: the rounding of whole units overshoots
// some caps, and units must move. The plan must still fit and cover everything.
TEST_P(PlannerMatrix, TightCapsMoveUnits) {
  const PlanMode mode = GetParam();
  int moved = 0, planned = 0, refused = 0;
  for (const Case& k : models()) {
    if (k.name == "fixture-exl3-4.0bpw") continue;  // two attention units: no 3% plan exists for 3+ ranks
    for (int n = 1; n <= 8; ++n) {
      for (const bool uneven : {false, true}) {
        SCOPED_TRACE(::testing::Message() << k.name << ", " << n << " ranks, " << (uneven ? "1:3" : "even"));
        const auto caps = caps_for(k, mode, uneven ? one_to_three(n) : even(n), 1.03, 0);
        auto plans = plan(k, mode, caps);
        if (mode == PlanMode::kLayers && !plans.ok()) {
          // Whole layers may not fit 3% slack; then the error must say where and by how much.
          EXPECT_EQ(plans.status().code(), absl::StatusCode::kResourceExhausted);
          EXPECT_GE(parse_shortfall(std::string(plans.status().message())).first, 0) << plans.status();
          ++refused;
          continue;
        }
        ASSERT_TRUE(plans.ok()) << plans.status();
        ++planned;
        check_plan(k, with(k, mode, caps), *plans);
        for (const RankPlan& p : *plans) {
          for (const LayerPlan& l : p.layers) {
            if (l.kv_head_end - l.kv_head_begin != p.layers[0].kv_head_end - p.layers[0].kv_head_begin) {
              ++moved;
              break;
            }
          }
        }
      }
    }
  }
  std::printf("%s: %d tight plans made, %d refused; %d ranks with ranges that differ between layers\n",
              plan_mode_name(mode).c_str(), planned, refused, moved);
  if (mode == PlanMode::kTensorParallel) {
    EXPECT_GT(moved, 0) << "no case exercised moving units";
  } else {
    EXPECT_GT(planned, refused) << "3% slack should usually be enough for whole layers";
  }
}

// One rank gets a cap that leaves nothing for shardable parts: tp gives it exactly the replicated
// parts (zero units of every component), layers gives it nothing at all (cap 0).
TEST_P(PlannerMatrix, ZeroShareRank) {
  const PlanMode mode = GetParam();
  for (const Case& k : models()) {
    for (int n = 2; n <= 8; ++n) {
      for (const int zero : {0, n / 2, n - 1}) {
        SCOPED_TRACE(::testing::Message() << k.name << ", " << n << " ranks, rank " << zero << " zero share");
        std::vector<double> w = one_to_three(n);
        w[zero] = 0;
        auto caps = caps_for(k, mode, w, 1.0, rounding_headroom(k, mode));
        if (mode == PlanMode::kTensorParallel) caps[zero] = tp_base(k.config, k.options);
        auto plans = plan(k, mode, caps);
        ASSERT_TRUE(plans.ok()) << plans.status();
        check_plan(k, with(k, mode, caps), *plans);
        const RankPlan& p = (*plans)[zero];
        if (mode == PlanMode::kTensorParallel) {
          for (const LayerPlan& l : p.layers) {
            EXPECT_EQ(l.kv_head_begin, l.kv_head_end);
            EXPECT_EQ(l.mlp_begin, l.mlp_end);
          }
          EXPECT_EQ(p.vocab_begin, p.vocab_end);
          EXPECT_EQ(p.cache_bytes, 0u);
          EXPECT_EQ(p.total_bytes(), caps[zero]);
        } else {
          EXPECT_EQ(p.first_layer, p.end_layer);
          EXPECT_FALSE(p.has_embedding || p.has_head);
          EXPECT_EQ(p.total_bytes(), 0u);
          int first = -1, last = -1;
          for (const RankPlan& q : *plans) {
            if (q.end_layer == q.first_layer) continue;
            if (first < 0) first = q.rank;
            last = q.rank;
          }
          ASSERT_GE(first, 0);
          EXPECT_TRUE((*plans)[first].has_embedding) << "the first rank with layers embeds";
          EXPECT_TRUE((*plans)[last].has_head) << "the last rank with layers has the head";
          if (zero == 0) {
            EXPECT_GT(first, 0);
          }
        }
      }
    }
  }
}

// The caps total 5% less than the model needs: the error gives both figures.
TEST_P(PlannerMatrix, ImpossibleTotal) {
  const PlanMode mode = GetParam();
  for (const Case& k : models()) {
    for (int n = 1; n <= 8; ++n) {
      SCOPED_TRACE(::testing::Message() << k.name << ", " << n << " ranks");
      const Priced whole = whole_model(k.config, k.options);
      const uint64_t model = whole.weights + whole.cache;
      std::vector<uint64_t> caps;
      uint64_t total = 0;
      const std::vector<double> weights = one_to_three(n);
      double sum = 0;
      for (double w : weights) sum += w;
      for (double w : weights) {
        const double share = w / sum * 0.95;
        if (mode == PlanMode::kTensorParallel) {
          // Each cap keeps the replicated parts, so only the total is short.
          const uint64_t base = tp_base(k.config, k.options);
          caps.push_back(base + static_cast<uint64_t>(static_cast<double>(model - (base - whole.workspace)) * share));
        } else {
          caps.push_back(static_cast<uint64_t>(static_cast<double>(model + whole.workspace) * share));
        }
        total += caps.back();
      }
      auto plans = plan(k, mode, caps);
      ASSERT_EQ(plans.status().code(), absl::StatusCode::kResourceExhausted) << plans.status();
      const std::string msg(plans.status().message());
      EXPECT_NE(msg.find("the model needs at least"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the caps total " + format_bytes(total)), std::string::npos) << msg;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, PlannerMatrix, ::testing::Values(PlanMode::kTensorParallel, PlanMode::kLayers),
                         [](const ::testing::TestParamInfo<PlanMode>& info) {
                           return info.param == PlanMode::kTensorParallel ? std::string("TensorParallel")
                                                                          : std::string("Layers");
                         });

// tp: a rank whose cap is below the replicated parts is named with its shortfall; adding the
// reported amount to its cap makes the plan work (the rank then holds zero units).
TEST(ShardPlanner, TpRankBelowReplicatedParts) {
  for (const Case& k : models()) {
    for (int n = 1; n <= 8; ++n) {
      const int short_rank = n / 2;
      SCOPED_TRACE(::testing::Message() << k.name << ", " << n << " ranks, rank " << short_rank << " short");
      auto caps = caps_for(k, PlanMode::kTensorParallel, even(n), 2.0, rounding_headroom(k, PlanMode::kTensorParallel));
      const uint64_t base = tp_base(k.config, k.options);
      caps[short_rank] = base * 3 / 4;
      auto plans = plan(k, PlanMode::kTensorParallel, caps);
      ASSERT_EQ(plans.status().code(), absl::StatusCode::kResourceExhausted) << plans.status();
      const std::string msg(plans.status().message());
      EXPECT_NE(msg.find(absl::StrCat("rank ", short_rank, " needs ", format_bytes(base - caps[short_rank]),
                                      " more than its ", format_bytes(caps[short_rank]), " cap")),
                std::string::npos)
          << msg;
      const auto [rank, amount] = parse_shortfall(msg);
      ASSERT_EQ(rank, short_rank) << msg;
      caps[rank] += amount;
      if (n == 1) continue;  // one rank: the model itself does not fit in a quarter of the replicated parts
      auto fixed = plan(k, PlanMode::kTensorParallel, caps);
      ASSERT_TRUE(fixed.ok()) << "adding the reported amount did not help: " << fixed.status();
      check_plan(k, with(k, PlanMode::kTensorParallel, caps), *fixed);
    }
  }
}

// layers: caps that hold k whole layers each (k = ceil(L / n) - 1) plus 0.95 of another layer;
// rank 0 also gets the embedding and the last rank the head. The plan is impossible: either the
// caps total too little, or whole layers do not fit. In the second case the error names the last
// rank and an amount that, added to its cap, makes the plan work.
TEST(ShardPlanner, LayersThatDoNotFitWhole) {
  int fragmented = 0;
  for (const Case& k : models()) {
    auto fp = build_model_footprint(k.config, BackendKind::kCpu);
    ASSERT_TRUE(fp.ok());
    const Priced whole = whole_model(k.config, k.options);
    const uint64_t layer = fp->layer_weight_bytes(0) + fp->layer_cache_bytes(0, k.options.cache_tokens());
    for (int n = 1; n <= 8; ++n) {
      SCOPED_TRACE(::testing::Message() << k.name << ", " << n << " ranks");
      const int64_t per_rank = (k.config.num_layers + n - 1) / n - 1;
      std::vector<uint64_t> caps(n, whole.workspace + per_rank * layer + layer * 95 / 100);
      caps[0] += fp->embedding_bytes;
      caps[n - 1] += fp->head_weight_bytes();
      uint64_t total = 0;
      for (uint64_t cap : caps) total += cap;
      auto plans = plan(k, PlanMode::kLayers, caps);
      ASSERT_EQ(plans.status().code(), absl::StatusCode::kResourceExhausted) << plans.status();
      const std::string msg(plans.status().message());
      if (total < whole.weights + whole.cache + whole.workspace) {
        EXPECT_NE(msg.find("the model needs at least"), std::string::npos) << msg;
        continue;
      }
      ++fragmented;
      const auto [rank, amount] = parse_shortfall(msg);
      ASSERT_EQ(rank, n - 1) << msg;
      EXPECT_NE(msg.find("whole layers do not fit"), std::string::npos) << msg;
      caps[rank] += amount;
      auto fixed = plan(k, PlanMode::kLayers, caps);
      ASSERT_TRUE(fixed.ok()) << "adding the reported amount did not help: " << fixed.status();
      check_plan(k, with(k, PlanMode::kLayers, caps), *fixed);
    }
  }
  EXPECT_GT(fragmented, 10);
}

TEST(ShardPlanner, OneRankHoldsEverything) {
  for (const Case& k : models()) {
    for (const PlanMode mode : {PlanMode::kTensorParallel, PlanMode::kLayers}) {
      const Priced whole = whole_model(k.config, k.options);
      const std::vector<uint64_t> caps = {whole.weights + whole.cache + whole.workspace};
      auto plans = plan(k, mode, caps);
      ASSERT_TRUE(plans.ok()) << k.name << ": " << plans.status();
      EXPECT_EQ((*plans)[0].total_bytes(), caps[0]) << k.name << " fits exactly";
      auto over = plan(k, mode, {caps[0] - 1});
      EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << k.name;
    }
  }
}

// The CUDA footprint of the fixture: plans in both modes cover everything within the caps; in tp
// mode the ranks together hold the whole model plus the unsplit EXL3 scale vectors (suh/svh) that
// every holder of a slice keeps.
TEST(ShardPlanner, CudaFootprintOfTheFixture) {
  const std::string dir = testing::source_path("models/exl3-4.0bpw");
  auto config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto tensors = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  auto fp = build_model_footprint(*config, BackendKind::kCuda, &*tensors);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const Case k{"fixture-cuda", *config, models()[2].options};
  const uint64_t stored = fp->total_weight_bytes();
  for (const PlanMode mode : {PlanMode::kTensorParallel, PlanMode::kLayers}) {
    for (int n = 1; n <= 8; ++n) {
      SCOPED_TRACE(::testing::Message() << plan_mode_name(mode) << ", " << n << " ranks");
      PlannerOptions o = with(k, mode, {});
      PlannerOptions sized = o;  // the CUDA reserve depends on the world size (NCCL buffers)
      sized.caps.assign(n, 0);
      const uint64_t per_rank = fp->replicated_bytes() + rank_reserve_bytes(*fp, sized);
      for (double w : one_to_three(n)) {
        o.caps.push_back(per_rank +
                         static_cast<uint64_t>(2.0 * w / n * (stored + fp->total_cache_bytes(o.cache_tokens()))));
      }
      auto plans = plan_shards(*fp, o);
      ASSERT_TRUE(plans.ok()) << plans.status();
      check_plan(k, o, *plans, /*fp32_priced=*/false);
      uint64_t held = 0, replicas = 0;
      for (const RankPlan& p : *plans) {
        held += p.weight_bytes;
        if (p.has_embedding) ++replicas;
      }
      if (mode == PlanMode::kLayers) {
        EXPECT_EQ(held, stored);
      } else {
        EXPECT_GE(held, stored + (replicas - 1) * fp->replicated_bytes());
      }
    }
  }
}

TEST(ShardPlanner, TpRankBelowReplicatedPartsIsNamed) {
  const Case k = models()[0];
  auto caps = caps_for(k, PlanMode::kTensorParallel, even(3), 2.0, 0);
  caps[1] = 0;
  auto plans = plan(k, PlanMode::kTensorParallel, caps);
  ASSERT_EQ(plans.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string msg(plans.status().message());
  EXPECT_NE(msg.find("rank 1 needs " + format_bytes(tp_base(k.config, k.options)) + " more than its 0.00 MiB cap"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("embedding and norms"), std::string::npos) << msg;
}

TEST(ShardPlanner, RejectsBadOptions) {
  const Case k = models()[0];
  auto fp = build_model_footprint(k.config, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok());
  PlannerOptions o = k.options;
  EXPECT_EQ(plan_shards(*fp, o).status().code(), absl::StatusCode::kInvalidArgument);  // no caps
  o.caps = {kGiB * 100};
  o.page_size = 0;
  EXPECT_EQ(plan_shards(*fp, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*parse_plan_mode("tp"), PlanMode::kTensorParallel);
  EXPECT_EQ(*parse_plan_mode("layers"), PlanMode::kLayers);
  EXPECT_FALSE(parse_plan_mode("pipeline").ok());
  EXPECT_EQ(plan_mode_name(PlanMode::kLayers), "layers");
}

TEST(ShardPlanner, CachePagesArePerSequence) {
  PlannerOptions o;
  o.max_seq_len = 1000;
  o.max_batch = 3;
  o.page_size = 256;
  EXPECT_EQ(o.sequence_pages(), 4);
  EXPECT_EQ(o.num_pages(), 12);  // 3 sequences x ceil(1000 / 256) pages
  EXPECT_EQ(o.cache_tokens(), 12 * 256);
  o.requested_cache_tokens = 1025;  // whole pages
  EXPECT_EQ(o.num_pages(), 5);
  EXPECT_EQ(o.with_pages(7).num_pages(), 7);
  EXPECT_EQ(o.with_pages(7).step_shape().pages_per_seq, 7);
}

// Without an explicit cache size, caps too small for max_batch sequences get the most pages that
// fit every rank (the same count on each), down to one full-length sequence; below that the
// refusal names the rank. CPU footprint of an 8B shape, fp32: 128 KiB of cache a token.
TEST(ShardPlanner, CacheFitsTheCapsWhenMaxBatchDoesNot) {
  const Case k = models()[0];
  auto fp = build_model_footprint(k.config, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok());
  for (const PlanMode mode : {PlanMode::kTensorParallel, PlanMode::kLayers}) {
    SCOPED_TRACE(plan_mode_name(mode));
    PlannerOptions o = with(k, mode, {});
    o.requested_cache_tokens = 0;
    o.max_batch = 8;  // 8 x 32 pages of 32 MiB (all ranks together): 8 GiB
    const uint64_t page = fp->total_cache_bytes(o.page_size);
    const uint64_t fixed = fp->total_weight_bytes() + 2 * rank_reserve_bytes(*fp, o) + 2 * fp->replicated_bytes();
    // Room for about 2.5 sequences, over two ranks 1:3.
    const uint64_t total = fixed + 80 * page;
    o.caps = {total / 4, total - total / 4};
    auto plans = plan_shards(*fp, o);
    ASSERT_TRUE(plans.ok()) << plans.status();
    const int64_t pages = plans->front().num_pages;
    EXPECT_GE(pages, 32);
    EXPECT_LT(pages, 8 * 32);
    for (const RankPlan& p : *plans) {
      EXPECT_EQ(p.num_pages, pages);
      EXPECT_LE(p.total_bytes(), o.caps[p.rank]);
    }
    EXPECT_EQ(plan_shards(*fp, o.with_pages(pages + 1)).status().code(), absl::StatusCode::kResourceExhausted);
    // Caps that do not even hold the weights with the fixed parts: refused, naming a rank and the
    // smallest cache.
    const uint64_t weights = fp->total_weight_bytes();
    o.caps = {weights / 4, weights - weights / 4};
    auto refused = plan_shards(*fp, o);
    ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
    const std::string msg(refused.status().message());
    EXPECT_GE(parse_shortfall(msg).first, 0) << msg;
    EXPECT_NE(msg.find("one sequence of --max-seq-len 8192, 32 pages of 256 tokens"), std::string::npos) << msg;
  }
}

TEST(ShardPlanner, ByteUnits) {
  EXPECT_EQ(gib_to_bytes(2.0), 2 * kGiB);
  EXPECT_EQ(gib_to_bytes(-1.0), 0u);
  EXPECT_EQ(format_bytes(3 * kGiB + kGiB / 5), "3.20 GiB");
  EXPECT_EQ(format_bytes(kMiB * 25 / 2), "12.50 MiB");
  EXPECT_EQ(format_bytes(0), "0.00 MiB");
}

}  // namespace
}  // namespace exl3
