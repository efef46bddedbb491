// Tensor-parallel and layer-split planning over per-rank hard caps (rules in shard_planner.h).
#include "coordinator/planner/shard_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/byte_units.h"

namespace exl3 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string range_text(int64_t begin, int64_t end) {
  return end - begin == 1 ? absl::StrCat(begin) : absl::StrCat(begin, "-", end - 1);
}

// The unit range of a component that a feature range [begin, end) covers (begin is unit-aligned,
// end is unit-aligned or the extent); an empty range may sit at the extent, past the last full unit.
std::pair<int64_t, int64_t> unit_range(const ComponentFootprint& c, int64_t begin, int64_t end) {
  if (end <= begin) return {0, 0};
  return {begin / c.unit_size, ceil_div(end, c.unit_size)};
}

// Splits `units` over ranks in proportion to `rooms` with largest-remainder rounding (ties go to
// the lower rank). When every room is zero nothing is given out; the caller's total check has then
// already refused the plan.
std::vector<int64_t> proportional_split(int64_t units, const std::vector<uint64_t>& rooms) {
  const size_t n = rooms.size();
  std::vector<int64_t> counts(n, 0);
  unsigned __int128 total = 0;
  for (uint64_t r : rooms) total += r;
  if (total == 0 || units == 0) return counts;
  std::vector<unsigned __int128> remainder(n);
  int64_t given = 0;
  for (size_t r = 0; r < n; ++r) {
    const unsigned __int128 scaled = static_cast<unsigned __int128>(units) * rooms[r];
    counts[r] = static_cast<int64_t>(scaled / total);
    remainder[r] = scaled % total;
    given += counts[r];
  }
  std::vector<size_t> order(n);
  for (size_t r = 0; r < n; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; given < units; ++i, ++given) ++counts[order[i % n]];
  return counts;
}

// ---- Tensor parallel ------------------------------------------------------------------------------

// Every splittable component of the model, in a fixed order: attention of layers 0..L-1, MLP of
// layers 0..L-1, the head. `order` breaks ties when choosing which unit to move (higher first).
struct TpComponent {
  const ComponentFootprint* footprint;
  int64_t order;
};

class TpPlanner {
 public:
  TpPlanner(const ModelFootprint& fp, const PlannerOptions& options) : fp_(fp), options_(options) {
    world_ = static_cast<int>(options.caps.size());
    tokens_ = options.cache_tokens();
    const int64_t layers = static_cast<int64_t>(fp.layers.size());
    for (int64_t l = 0; l < layers; ++l) comps_.push_back({&fp.layers[l].attention, l});
    for (int64_t l = 0; l < layers; ++l) comps_.push_back({&fp.layers[l].mlp, l});
    comps_.push_back({&fp.head, layers});
    base_ = fp.replicated_bytes() + rank_reserve_bytes(fp, options);
  }

  absl::StatusOr<std::vector<RankPlan>> plan() {
    const std::vector<uint64_t>& caps = options_.caps;
    for (int r = 0; r < world_; ++r) {
      if (base_ > caps[r]) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "rank ", r, " needs ", format_bytes(base_ - caps[r]), " more than its ", format_bytes(caps[r]),
            " cap just for what every rank holds in tp mode (embedding and norms ",
            format_bytes(fp_.replicated_bytes()), ", workspace", fp_.backend == BackendKind::kCuda ? " and CUDA overheads " : " ",
            format_bytes(base_ - fp_.replicated_bytes()), ")"));
      }
    }
    uint64_t sharded = 0, cap_total = 0;
    for (const TpComponent& c : comps_) sharded += cost(*c.footprint, 0, c.footprint->units);
    for (uint64_t cap : caps) cap_total += cap;
    const uint64_t need = sharded + base_ * static_cast<uint64_t>(world_);
    if (need > cap_total) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the model needs at least ", format_bytes(need), " (", format_bytes(sharded),
          " of weights and KV cache split over the ranks, plus ", format_bytes(base_), " on each of ", world_,
          " ranks for the embedding, norms and workspace), the caps total ", format_bytes(cap_total), ": ",
          format_bytes(need - cap_total), " short; ", proportional_shortfalls()));
    }

    proportional_layout(counts_, rank_bytes_, totals_);
    EXL3_RETURN_IF_ERROR(rebalance());
    return build_plans();
  }

 private:
  uint64_t cost(const ComponentFootprint& c, int64_t begin, int64_t end) const {
    return c.weight_bytes(begin, end) + c.cache_bytes(begin, end, tokens_);
  }

  // The plan's first layout: each component type's units split in proportion to the rooms (caps
  // minus base_; evenly when no rank has room), the same split for every layer. Sets each
  // component's units and bytes per rank and each rank's total (base_ included).
  void proportional_layout(std::vector<std::vector<int64_t>>& counts, std::vector<std::vector<uint64_t>>& rank_bytes,
                           std::vector<uint64_t>& totals) const {
    std::vector<uint64_t> rooms(world_);
    bool any_room = false;
    for (int r = 0; r < world_; ++r) {
      rooms[r] = options_.caps[r] - base_;
      any_room = any_room || rooms[r] > 0;
    }
    if (!any_room) rooms.assign(world_, 1);
    const std::vector<int64_t> attention = proportional_split(fp_.layers.front().attention.units, rooms);
    const std::vector<int64_t> mlp = proportional_split(fp_.layers.front().mlp.units, rooms);
    const std::vector<int64_t> head = proportional_split(fp_.head.units, rooms);
    counts.clear();
    rank_bytes.clear();
    for (const TpComponent& c : comps_) {
      counts.push_back(c.footprint->kind == ComponentKind::kAttention ? attention
                       : c.footprint->kind == ComponentKind::kMlp     ? mlp
                                                                      : head);
      rank_bytes.push_back(component_rank_bytes(*c.footprint, counts.back()));
    }
    totals.assign(world_, base_);
    for (const std::vector<uint64_t>& per_rank : rank_bytes) {
      for (int r = 0; r < world_; ++r) totals[r] += per_rank[r];
    }
  }

  // What each rank lacks in the plan's first layout (proportional_layout: whole units, so a rank
  // may hold a unit more than its exact share): "with the units split in proportion to the caps,
  // rank 0 needs X more than its C cap, rank 1 needs ...". Called when the caps total too little,
  // so at least one rank is short.
  std::string proportional_shortfalls() const {
    std::vector<std::vector<int64_t>> counts;
    std::vector<std::vector<uint64_t>> rank_bytes;
    std::vector<uint64_t> totals;
    proportional_layout(counts, rank_bytes, totals);
    std::string out = "with the units split in proportion to the caps";
    for (int r = 0; r < world_; ++r) {
      if (totals[r] <= options_.caps[r]) continue;
      absl::StrAppend(&out, ", rank ", r, " needs ", format_bytes(totals[r] - options_.caps[r]), " more than its ",
                      format_bytes(options_.caps[r]), " cap");
    }
    return out;
  }

  // Bytes of one component on every rank, for unit counts laid out contiguously in rank order.
  std::vector<uint64_t> component_rank_bytes(const ComponentFootprint& c, const std::vector<int64_t>& counts) const {
    std::vector<uint64_t> bytes(world_);
    int64_t begin = 0;
    for (int r = 0; r < world_; ++r) {
      bytes[r] = cost(c, begin, begin + counts[r]);
      begin += counts[r];
    }
    return bytes;
  }

  // Moves units off ranks over their caps (rules in shard_planner.h). Each move lowers the
  // overflowing rank's total and raises no other rank above its cap (nor any rank already over),
  // so the summed overflow strictly falls and the loop ends.
  absl::Status rebalance() {
    const std::vector<uint64_t>& caps = options_.caps;
    while (true) {
      int over = -1;
      for (int r = 0; r < world_; ++r) {
        if (totals_[r] > caps[r] && (over < 0 || totals_[r] - caps[r] > totals_[over] - caps[over])) over = r;
      }
      if (over < 0) return absl::OkStatus();
      const uint64_t overflow = totals_[over] - caps[over];

      struct Move {
        size_t comp = 0;
        int to = -1;
        uint64_t reduction = 0;
        uint64_t room_after = 0;
        std::vector<uint64_t> bytes;
      };
      Move best;
      auto better = [&](const Move& m) {
        if (best.to < 0) return true;
        const bool clears = m.reduction >= overflow, best_clears = best.reduction >= overflow;
        if (clears != best_clears) return clears;
        if (m.reduction != best.reduction) return clears ? m.reduction < best.reduction : m.reduction > best.reduction;
        if (comps_[m.comp].order != comps_[best.comp].order) return comps_[m.comp].order > comps_[best.comp].order;
        return m.room_after > best.room_after;
      };
      for (size_t c = 0; c < comps_.size(); ++c) {
        if (counts_[c][over] == 0) continue;
        for (int to = 0; to < world_; ++to) {
          if (to == over) continue;
          std::vector<int64_t> counts = counts_[c];
          --counts[over];
          ++counts[to];
          std::vector<uint64_t> bytes = component_rank_bytes(*comps_[c].footprint, counts);
          bool ok = true;
          uint64_t new_over = 0, room_after = 0;
          for (int s = 0; s < world_ && ok; ++s) {
            const uint64_t t = totals_[s] - rank_bytes_[c][s] + bytes[s];
            if (s == over) {
              ok = t < totals_[s];
              new_over = t;
            } else {
              ok = t <= std::max(caps[s], totals_[s]);
              if (s == to) room_after = caps[s] >= t ? caps[s] - t : 0;
            }
          }
          if (!ok) continue;
          Move m{c, to, totals_[over] - new_over, room_after, std::move(bytes)};
          if (better(m)) best = std::move(m);
        }
      }
      if (best.to < 0) {
        return absl::ResourceExhaustedError(
            absl::StrCat("rank ", over, " needs ", format_bytes(overflow), " more than its ", format_bytes(caps[over]),
                         " cap, and none of its units fits on another rank (tp mode; rooms left: ", rooms_text(), ")"));
      }
      --counts_[best.comp][over];
      ++counts_[best.comp][best.to];
      for (int s = 0; s < world_; ++s) totals_[s] = totals_[s] - rank_bytes_[best.comp][s] + best.bytes[s];
      rank_bytes_[best.comp] = std::move(best.bytes);
    }
  }

  std::string rooms_text() const {
    std::string out;
    for (int r = 0; r < world_; ++r) {
      const uint64_t room = options_.caps[r] > totals_[r] ? options_.caps[r] - totals_[r] : 0;
      absl::StrAppend(&out, r == 0 ? "" : ", ", "rank ", r, " ", format_bytes(room));
    }
    return out;
  }

  std::vector<RankPlan> build_plans() const {
    const int64_t layers = static_cast<int64_t>(fp_.layers.size());
    std::vector<RankPlan> plans(world_);
    std::vector<int64_t> begin(comps_.size(), 0);
    for (int r = 0; r < world_; ++r) {
      RankPlan& p = plans[r];
      p.mode = PlanMode::kTensorParallel;
      p.rank = r;
      p.world_size = world_;
      p.first_layer = 0;
      p.end_layer = layers;
      p.has_embedding = true;
      p.has_head = true;
      p.num_pages = options_.num_pages();
      p.page_size = options_.page_size;
      for (int64_t l = 0; l < layers; ++l) p.layers.push_back(LayerPlan{l, 0, 0, 0, 0});
      for (size_t c = 0; c < comps_.size(); ++c) {
        const ComponentFootprint& f = *comps_[c].footprint;
        const int64_t b = f.feature(begin[c]), e = f.feature(begin[c] + counts_[c][r]);
        begin[c] += counts_[c][r];
        if (f.kind == ComponentKind::kAttention) {
          p.layers[f.layer].kv_head_begin = b;
          p.layers[f.layer].kv_head_end = e;
        } else if (f.kind == ComponentKind::kMlp) {
          p.layers[f.layer].mlp_begin = b;
          p.layers[f.layer].mlp_end = e;
        } else {
          p.vocab_begin = b;
          p.vocab_end = e;
        }
      }
      const RankBytes bytes = price_rank(fp_, options_, p);
      p.weight_bytes = bytes.weights;
      p.cache_bytes = bytes.cache;
      p.workspace_bytes = bytes.workspace;
      EXL3_CHECK(p.total_bytes() == totals_[r], "rank ", r, " priced at ", p.total_bytes(), ", planned ", totals_[r]);
      EXL3_CHECK(p.total_bytes() <= options_.caps[r], "rank ", r, " over its cap after planning");
    }
    return plans;
  }

  const ModelFootprint& fp_;
  const PlannerOptions& options_;
  int world_ = 0;
  int64_t tokens_ = 0;
  uint64_t base_ = 0;  // replicated weights + workspace, on every rank
  std::vector<TpComponent> comps_;
  std::vector<std::vector<int64_t>> counts_;       // [component][rank] units
  std::vector<std::vector<uint64_t>> rank_bytes_;  // [component][rank] weight + cache bytes
  std::vector<uint64_t> totals_;                   // [rank]
};

// ---- Layer split ----------------------------------------------------------------------------------

class LayerPlanner {
 public:
  LayerPlanner(const ModelFootprint& fp, const PlannerOptions& options) : fp_(fp), options_(options) {
    world_ = static_cast<int>(options.caps.size());
    layers_ = static_cast<int64_t>(fp.layers.size());
    workspace_ = rank_reserve_bytes(fp, options);
    prefix_.assign(layers_ + 1, 0);
    for (int64_t l = 0; l < layers_; ++l) {
      prefix_[l + 1] = prefix_[l] + fp.layer_weight_bytes(l) + fp.layer_cache_bytes(l, options.cache_tokens());
    }
  }

  absl::StatusOr<std::vector<RankPlan>> plan() const {
    const std::vector<uint64_t>& caps = options_.caps;
    const uint64_t model = cumulative(layers_);
    uint64_t cap_total = 0;
    for (uint64_t cap : caps) cap_total += cap;
    if (model + workspace_ > cap_total) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the model needs at least ", format_bytes(model + workspace_), " (", format_bytes(model),
                       " of weights and KV cache, plus ", format_bytes(workspace_),
                       " workspace on each rank that holds layers), the caps total ", format_bytes(cap_total), ": ",
                       format_bytes(model + workspace_ - cap_total), " short (layer split); filling the ranks in order, ",
                       greedy_shortfall()));
    }

    // need[r]: the earliest layer from which ranks r..N-1 can hold the rest of the model.
    std::vector<int64_t> need(world_ + 1, layers_);
    for (int r = world_ - 1; r >= 0; --r) {
      int64_t s = need[r + 1];
      while (s > 0 && fits(r, s - 1, need[r + 1])) --s;
      need[r] = s;
    }
    if (need[0] != 0) return fragmentation_error();

    std::vector<uint64_t> rooms(world_);
    unsigned __int128 room_total = 0;
    for (int r = 0; r < world_; ++r) {
      rooms[r] = caps[r] > workspace_ ? caps[r] - workspace_ : 0;
      room_total += rooms[r];
    }
    std::vector<RankPlan> plans(world_);
    int64_t start = 0;
    unsigned __int128 room_prefix = 0;
    for (int r = 0; r < world_; ++r) {
      room_prefix += rooms[r];
      int64_t end = layers_;
      if (r + 1 < world_) {
        const int64_t lo = std::max(start, need[r + 1]);
        int64_t hi = start;
        while (hi < layers_ && fits(r, start, hi + 1)) ++hi;
        EXL3_CHECK(lo <= hi, "layer split: rank ", r, " cannot reach layer ", lo);
        const unsigned __int128 target =
            room_total == 0 ? 0 : static_cast<unsigned __int128>(model) * room_prefix / room_total;
        end = lo;
        for (int64_t e = lo; e <= hi; ++e) {
          if (distance(cumulative(e), target) < distance(cumulative(end), target)) end = e;
        }
      }
      plans[r] = make_plan(r, start, end);
      EXL3_CHECK(plans[r].total_bytes() == segment_bytes(start, end), "rank ", r, " priced differently");
      EXL3_CHECK(plans[r].total_bytes() <= caps[r], "rank ", r, " over its cap after planning");
      start = end;
    }
    EXL3_CHECK(start == layers_, "layer split left layers unassigned");
    return plans;
  }

 private:
  static unsigned __int128 distance(uint64_t a, unsigned __int128 b) { return a > b ? a - b : b - a; }

  // Weights and cache of layers [0, e) with the embedding (and the head when e is the last layer).
  uint64_t cumulative(int64_t e) const {
    if (e == 0) return 0;
    return fp_.embedding_bytes + prefix_[e] + (e == layers_ ? fp_.head_weight_bytes() : 0);
  }

  // Everything a rank holding layers [s, e) allocates.
  uint64_t segment_bytes(int64_t s, int64_t e) const {
    if (e <= s) return 0;
    return prefix_[e] - prefix_[s] + (s == 0 ? fp_.embedding_bytes : 0) + (e == layers_ ? fp_.head_weight_bytes() : 0) +
           workspace_;
  }

  bool fits(int r, int64_t s, int64_t e) const { return segment_bytes(s, e) <= options_.caps[r]; }

  // Front-greedy fill: earlier ranks take as many layers as fit; the last rank is short by the
  // smallest possible amount, which is what the errors report. Called only when the last rank is
  // then over its cap (the caps total too little, or whole layers do not fit them).
  std::string greedy_shortfall() const {
    int64_t s = 0;
    for (int r = 0; r + 1 < world_; ++r) {
      int64_t e = s;
      while (e < layers_ && fits(r, s, e + 1)) ++e;
      s = e;
    }
    const int last = world_ - 1;
    const uint64_t need = segment_bytes(s, layers_);
    const uint64_t cap = options_.caps[last];
    std::string what =
        absl::StrCat("layers ", range_text(s, layers_), s == 0 ? ", the embedding" : "", " and the head");
    std::string before = world_ == 1 ? ""
                                     : absl::StrCat(" after ranks 0-", last - 1, " take as many layers as fit (",
                                                    s == 0 ? "none" : absl::StrCat("layers ", range_text(0, s)), ")");
    return absl::StrCat("rank ", last, " needs ", format_bytes(need > cap ? need - cap : 0), " more than its ",
                        format_bytes(cap), " cap for ", what, " (", format_bytes(need),
                        " with their KV cache and workspace)", before);
  }

  absl::Status fragmentation_error() const {
    return absl::ResourceExhaustedError(
        absl::StrCat(greedy_shortfall(), "; whole layers do not fit the caps (layer split)"));
  }

  RankPlan make_plan(int r, int64_t s, int64_t e) const {
    const ModelConfig& c = fp_.config;
    RankPlan p;
    p.mode = PlanMode::kLayers;
    p.rank = r;
    p.world_size = world_;
    p.first_layer = s;
    p.end_layer = e;
    for (int64_t l = s; l < e; ++l) p.layers.push_back(LayerPlan{l, 0, c.num_kv_heads, 0, c.intermediate_size});
    p.has_embedding = e > s && s == 0;
    p.has_head = e > s && e == layers_;
    p.vocab_begin = 0;
    p.vocab_end = p.has_head ? c.vocab_size : 0;
    p.num_pages = options_.num_pages();
    p.page_size = options_.page_size;
    const RankBytes bytes = price_rank(fp_, options_, p);
    p.weight_bytes = bytes.weights;
    p.cache_bytes = bytes.cache;
    p.workspace_bytes = bytes.workspace;
    return p;
  }

  const ModelFootprint& fp_;
  const PlannerOptions& options_;
  int world_ = 0;
  int64_t layers_ = 0;
  uint64_t workspace_ = 0;
  std::vector<uint64_t> prefix_;  // weights + cache of layers [0, l)
};

absl::Status validate(const ModelFootprint& fp, const PlannerOptions& o) {
  if (o.caps.empty()) return absl::InvalidArgumentError("the plan needs at least one rank (one cap per rank)");
  if (o.max_seq_len <= 0 || o.max_batch <= 0 || o.page_size <= 0 || o.step_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("planner options must be positive: max_seq_len ", o.max_seq_len,
                                                   ", max_batch ", o.max_batch, ", page_size ", o.page_size,
                                                   ", step_tokens ", o.step_tokens));
  }
  if (o.requested_cache_tokens < 0 || o.pages < 0) {
    return absl::InvalidArgumentError(absl::StrCat("planner options must not be negative: cache tokens ",
                                                   o.requested_cache_tokens, ", pages ", o.pages));
  }
  if (o.requested_cache_tokens > 0 && o.wanted_pages() < o.sequence_pages()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cache-tokens ", o.requested_cache_tokens, " (", o.wanted_pages(), " pages of ", o.page_size,
        " tokens) holds less than one sequence of --max-seq-len ", o.max_seq_len, " (", o.sequence_pages(),
        " pages); ask for at least ", o.sequence_pages() * o.page_size, " tokens or lower --max-seq-len"));
  }
  if (fp.layers.empty()) return absl::InvalidArgumentError("the model has no layers");
  return absl::OkStatus();
}

// One planning attempt with exactly o.num_pages() pages.
std::string cache_text(const PlannerOptions& o, int64_t pages) {
  return absl::StrCat(pages, " pages of ", o.page_size, " tokens = ", pages * o.page_size, " tokens");
}

absl::StatusOr<std::vector<RankPlan>> plan_model_pages(const ModelFootprint& fp, const PlannerOptions& o) {
  if (o.mode == PlanMode::kTensorParallel) return TpPlanner(fp, o).plan();
  return LayerPlanner(fp, o).plan();
}

// With a draft model, its rank (the lowest with the head: rank 0 in tp mode, the last in a layer
// split) plans the model within its cap less the draft's bytes, which then count as workspace.
absl::StatusOr<std::vector<RankPlan>> plan_pages(const ModelFootprint& fp, const PlannerOptions& o) {
  if (o.draft == nullptr) return plan_model_pages(fp, o);
  const int rank = draft_model_rank(o);
  const uint64_t extra = draft_model_bytes(*o.draft, o);
  if (extra >= o.caps[rank]) {
    return absl::ResourceExhaustedError(absl::StrCat("rank ", rank, " holds the draft model (", format_bytes(extra),
                                                     " with its KV cache of ", cache_text(o, o.num_pages()),
                                                     "), more than its cap of ", format_bytes(o.caps[rank])));
  }
  PlannerOptions model = o;
  model.draft = nullptr;
  model.caps[rank] -= extra;
  EXL3_ASSIGN_OR_RETURN(std::vector<RankPlan> plans, plan_model_pages(fp, model));
  plans[rank].workspace_bytes += extra;
  return plans;
}


}  // namespace

uint64_t draft_model_bytes(const ModelFootprint& draft, const PlannerOptions& o) {
  return draft.total_weight_bytes() + draft.total_cache_bytes(o.cache_tokens()) +
         draft.workspace.bytes(o.step_tokens, o.max_seq_len);
}

int draft_model_rank(const PlannerOptions& o) {
  return o.mode == PlanMode::kTensorParallel ? 0 : static_cast<int>(o.caps.size()) - 1;
}

std::string plan_mode_name(PlanMode mode) { return mode == PlanMode::kTensorParallel ? "tp" : "layers"; }

absl::StatusOr<PlanMode> parse_plan_mode(const std::string& name) {
  if (name == "tp") return PlanMode::kTensorParallel;
  if (name == "layers") return PlanMode::kLayers;
  return absl::InvalidArgumentError(absl::StrCat("unknown shard mode \"", name, "\" (expected \"tp\" or \"layers\")"));
}

int64_t PlannerOptions::sequence_pages() const { return ceil_div(max_seq_len, page_size); }

int64_t PlannerOptions::wanted_pages() const {
  return requested_cache_tokens > 0 ? ceil_div(requested_cache_tokens, page_size) : max_batch * sequence_pages();
}

PlannerOptions PlannerOptions::with_pages(int64_t n) const {
  PlannerOptions o = *this;
  o.pages = n;
  return o;
}

std::string kv_cache_summary(const PlannerOptions& o, int64_t pages) {
  const std::string head = absl::StrCat("KV cache: ", pages, " pages of ", o.page_size, " tokens");
  const int64_t tokens = pages * o.page_size;
  if (o.requested_cache_tokens > 0) {
    return absl::StrCat(head, " per rank (", tokens, " tokens, as --cache-tokens ", o.requested_cache_tokens, " asks)");
  }
  if (cache_was_fitted(o, pages)) {
    return absl::StrCat(head, " (", tokens, " tokens) fit, fewer than max-batch ", o.max_batch, " x ", o.max_seq_len,
                        "; requests wait for pages");
  }
  return absl::StrCat(head, " per rank (", tokens, " tokens: max-batch ", o.max_batch, " x ", o.max_seq_len, ")");
}

bool cache_was_fitted(const PlannerOptions& o, int64_t pages) {
  return o.requested_cache_tokens == 0 && pages < o.max_batch * o.sequence_pages();
}

StepShape PlannerOptions::step_shape() const {
  StepShape s;
  s.tokens = step_tokens;
  s.seqs = max_batch;
  s.pages_per_seq = num_pages();
  s.logit_rows = max_batch * logit_rows_per_seq;
  s.page_size = page_size;
  return s;
}

CudaRankReserve cuda_plan_reserve(const ModelFootprint& fp, const PlannerOptions& options) {
  const int world = static_cast<int>(options.caps.size());
  const RankShape widest = widest_rank_shape(fp.config, options.mode == PlanMode::kTensorParallel, world);
  CudaRankReserve r = cuda_rank_reserve(fp.config, widest, options.step_shape());
  r.oneshot = cuda_oneshot_all_reduce_bytes(world, options.oneshot_all_reduce_max_bytes);
  return r;
}

uint64_t rank_reserve_bytes(const ModelFootprint& fp, const PlannerOptions& options) {
  if (fp.backend == BackendKind::kCpu) return fp.workspace.bytes(options.step_tokens, options.max_seq_len);
  return cuda_plan_reserve(fp, options).total();
}

RankBytes price_rank(const ModelFootprint& fp, const PlannerOptions& given, const RankPlan& plan) {
  const PlannerOptions options = plan.num_pages > 0 ? given.with_pages(plan.num_pages) : given;
  RankBytes b;
  const int64_t tokens = options.cache_tokens();
  bool holds_anything = plan.has_embedding || plan.has_head;
  if (plan.has_embedding) b.weights += fp.embedding_bytes;
  for (const LayerPlan& l : plan.layers) {
    const LayerFootprint& lf = fp.layers.at(l.layer);
    const auto [a0, a1] = unit_range(lf.attention, l.kv_head_begin, l.kv_head_end);
    const auto [m0, m1] = unit_range(lf.mlp, l.mlp_begin, l.mlp_end);
    b.weights += lf.norm_bytes + lf.attention.weight_bytes(a0, a1) + lf.mlp.weight_bytes(m0, m1);
    b.cache += lf.attention.cache_bytes(a0, a1, tokens);
    holds_anything = true;
  }
  if (plan.has_head) {
    const auto [h0, h1] = unit_range(fp.head, plan.vocab_begin, plan.vocab_end);
    b.weights += fp.final_norm_bytes + fp.head.weight_bytes(h0, h1);
  }
  if (holds_anything) b.workspace = rank_reserve_bytes(fp, options);
  return b;
}

absl::StatusOr<std::vector<RankPlan>> plan_shards(const ModelFootprint& footprint, const PlannerOptions& options) {
  EXL3_RETURN_IF_ERROR(validate(footprint, options));
  if (options.pages > 0) return plan_pages(footprint, options);
  const int64_t wanted = options.wanted_pages();
  absl::StatusOr<std::vector<RankPlan>> plans = plan_pages(footprint, options.with_pages(wanted));
  if (plans.ok() || !absl::IsResourceExhausted(plans.status())) return plans;
  if (options.requested_cache_tokens > 0) {
    return absl::ResourceExhaustedError(absl::StrCat(plans.status().message(), " (with the KV cache --cache-tokens ",
                                                     options.requested_cache_tokens, " asks for: ",
                                                     cache_text(options, wanted), ")"));
  }
  // Fit: the largest page count in [one sequence, wanted) that plans. Fewer pages never need more
  // bytes, so a binary search finds it (keeping the last plan actually made).
  const int64_t one = options.sequence_pages();
  if (one >= wanted) return plans;
  plans = plan_pages(footprint, options.with_pages(one));
  if (!plans.ok()) {
    if (!absl::IsResourceExhausted(plans.status())) return plans;
    return absl::ResourceExhaustedError(absl::StrCat(
        plans.status().message(), " (with the smallest KV cache: one sequence of --max-seq-len ", options.max_seq_len,
        ", ", cache_text(options, one), "; max-batch ", options.max_batch, " full-length sequences would need ",
        wanted, " pages)"));
  }
  int64_t fits = one, too_many = wanted;
  while (too_many - fits > 1) {
    const int64_t mid = fits + (too_many - fits) / 2;
    absl::StatusOr<std::vector<RankPlan>> attempt = plan_pages(footprint, options.with_pages(mid));
    if (attempt.ok()) {
      fits = mid;
      plans = std::move(attempt);
    } else if (absl::IsResourceExhausted(attempt.status())) {
      too_many = mid;
    } else {
      return attempt.status();
    }
  }
  return plans;
}

}  // namespace exl3
