// Rendering of a shard plan as a fixed-width text table with multi-line cells.
#include "coordinator/planner/plan_table.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/planner/byte_units.h"

namespace exl3 {
namespace {

using Cell = std::vector<std::string>;

std::string inclusive(int64_t begin, int64_t end) {
  if (end <= begin) return "none";
  return end - begin == 1 ? absl::StrCat(begin) : absl::StrCat(begin, "-", end - 1);
}

// Groups the rank's layers into runs with the same [begin, end) and prints one line per run; a
// single run is printed without its layers.
Cell ranges_cell(const RankPlan& p, const std::function<std::pair<int64_t, int64_t>(const LayerPlan&)>& range) {
  if (p.layers.empty()) return {"-"};
  struct Run {
    std::pair<int64_t, int64_t> range;
    int64_t first, last;
  };
  std::vector<Run> runs;
  for (const LayerPlan& l : p.layers) {
    const auto r = range(l);
    if (!runs.empty() && runs.back().range == r && runs.back().last + 1 == l.layer) {
      runs.back().last = l.layer;
    } else {
      runs.push_back({r, l.layer, l.layer});
    }
  }
  if (runs.size() == 1) return {inclusive(runs[0].range.first, runs[0].range.second)};
  Cell cell;
  for (const Run& run : runs) {
    cell.push_back(absl::StrCat(inclusive(run.range.first, run.range.second), " (",
                                run.first == run.last ? "layer " : "layers ", inclusive(run.first, run.last + 1), ")"));
  }
  return cell;
}

std::string percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return part == 0 ? "-" : "over";
  return absl::StrFormat("%.0f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string render(const std::vector<std::string>& header, const std::vector<bool>& right,
                   const std::vector<std::vector<Cell>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      for (const std::string& line : row[c]) width[c] = std::max(width[c], line.size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      absl::StrAppend(&out, c == 0 ? "" : "  ", right[c] ? pad + cells[c] : cells[c] + pad);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  out += std::string(total - 2, '-') + "\n";
  for (const auto& row : rows) {
    size_t height = 1;
    for (const Cell& cell : row) height = std::max(height, cell.size());
    for (size_t i = 0; i < height; ++i) {
      std::vector<std::string> cells;
      for (const Cell& cell : row) cells.push_back(i < cell.size() ? cell[i] : "");
      out += line(cells);
    }
  }
  return out;
}

// "KV cache F16", "KV cache K 4 bits, V 4 bits": what one cached element is stored as.
std::string kv_cache_widths(const ModelFootprint& fp) {
  const char* full = fp.backend == BackendKind::kCpu ? "F32" : "F16";
  if (!fp.cache_bits.quantized()) return absl::StrCat("KV cache ", full);
  auto width = [&](int bits) { return bits == 16 ? std::string(full) : absl::StrCat(bits, " bits"); };
  return absl::StrCat("KV cache K ", width(fp.cache_bits.k), ", V ", width(fp.cache_bits.v));
}

}  // namespace

std::string format_plan_table(const ModelFootprint& fp, const std::vector<RankPlan>& plans,
                              const std::vector<uint64_t>& caps, const PlannerOptions* options) {
  const ModelConfig& c = fp.config;
  const int64_t group = c.num_heads / c.num_kv_heads;
  std::string out;
  const PlanMode mode = plans.empty() ? PlanMode::kTensorParallel : plans.front().mode;
  absl::StrAppend(&out, mode == PlanMode::kTensorParallel ? "tensor-parallel" : "layer-split", " plan over ",
                  plans.size(), plans.size() == 1 ? " rank" : " ranks", ", ", backend_name(fp.backend), " backend (",
                  fp.backend == BackendKind::kCpu ? "weights dequantized to fp32"
                                                  : "EXL3 as stored, dense weights F16",
                  ", ", kv_cache_widths(fp), ")\n");
  absl::StrAppend(&out,
                  "model: ", c.architecture_name.empty() ? architecture_name(c.architecture) : c.architecture_name,
                  ", ", c.num_layers, " layers, hidden ", c.hidden_size, ", ", c.num_heads, " query / ", c.num_kv_heads,
                  " KV heads of ", c.head_dim, ", MLP ", c.intermediate_size, ", vocab ", c.vocab_size);
  if (fp.decoder_bits > 0) absl::StrAppend(&out, absl::StrFormat(", %.2f bpw decoder", fp.decoder_bits));
  if (fp.head_bits > 0) absl::StrAppend(&out, ", ", fp.head_bits, " bpw head");
  if (fp.head_from_embedding) absl::StrAppend(&out, ", head tied to the embedding");
  absl::StrAppend(&out, "\n");
  const ComponentFootprint& a = fp.layers.front().attention;
  const ComponentFootprint& m = fp.layers.front().mlp;
  absl::StrAppend(&out, "units: attention ", a.units, " x ", a.unit_size, " KV head", a.unit_size == 1 ? "" : "s", " (",
                  format_bytes(a.unit_weight_bytes()), "), MLP ", m.units, " x 128 columns (",
                  format_bytes(m.unit_weight_bytes()), "), lm_head ", fp.head.units, " x 128 rows (",
                  format_bytes(fp.head.unit_weight_bytes()), ")\n");
  const int64_t pages = plans.empty() ? 0 : plans.front().num_pages;
  if (!plans.empty()) {
    if (options != nullptr) {
      absl::StrAppend(&out, kv_cache_summary(*options, pages), "\n");
    } else {
      absl::StrAppend(&out, "KV cache: ", pages, " pages of ", plans.front().page_size, " tokens per rank\n");
    }
  }
  const char* where = mode == PlanMode::kTensorParallel ? " on every rank" : " on the rank with layer 0";
  if (fp.embedding_host_bytes > 0) {
    absl::StrAppend(&out, "embedding ", format_bytes(fp.embedding_host_bytes), " in pinned host memory", where,
                    " (not counted against the caps)\n");
  } else {
    absl::StrAppend(&out, "embedding ", format_bytes(fp.embedding_bytes), where, "\n");
  }
  absl::StrAppend(&out, "\n");

  const std::vector<std::string> header = {"rank",        "layers",     "embed/head", "q heads",  "kv heads",
                                           "MLP columns", "vocab rows", "weights",    "KV cache", "workspace",
                                           "total",       "cap",        "used"};
  const std::vector<bool> right = {true, false, false, false, false, false, false, true, true, true, true, true, true};
  std::vector<std::vector<Cell>> rows;
  uint64_t sum_weights = 0, sum_cache = 0, sum_workspace = 0, sum_caps = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const RankPlan& p = plans[i];
    const uint64_t cap = i < caps.size() ? caps[i] : 0;
    std::string holds = p.has_embedding && p.has_head ? "both" : p.has_embedding ? "embed" : p.has_head ? "head" : "-";
    rows.push_back({
        {absl::StrCat(p.rank)},
        {inclusive(p.first_layer, p.end_layer)},
        {holds},
        ranges_cell(p,
                    [&](const LayerPlan& l) {
                      return std::pair{l.kv_head_begin * group, l.kv_head_end * group};
                    }),
        ranges_cell(p,
                    [](const LayerPlan& l) {
                      return std::pair{l.kv_head_begin, l.kv_head_end};
                    }),
        ranges_cell(p,
                    [](const LayerPlan& l) {
                      return std::pair{l.mlp_begin, l.mlp_end};
                    }),
        {p.has_head ? inclusive(p.vocab_begin, p.vocab_end) : "-"},
        {format_bytes(p.weight_bytes)},
        {format_bytes(p.cache_bytes)},
        {format_bytes(p.workspace_bytes)},
        {format_bytes(p.total_bytes())},
        {format_bytes(cap)},
        {percent(p.total_bytes(), cap)},
    });
    sum_weights += p.weight_bytes;
    sum_cache += p.cache_bytes;
    sum_workspace += p.workspace_bytes;
    sum_caps += cap;
  }
  rows.push_back({{"all"},
                  {""},
                  {""},
                  {""},
                  {""},
                  {""},
                  {""},
                  {format_bytes(sum_weights)},
                  {format_bytes(sum_cache)},
                  {format_bytes(sum_workspace)},
                  {format_bytes(sum_weights + sum_cache + sum_workspace)},
                  {format_bytes(sum_caps)},
                  {percent(sum_weights + sum_cache + sum_workspace, sum_caps)}});
  out += render(header, right, rows);
  absl::StrAppend(
      &out, "ranges are inclusive",
      mode == PlanMode::kTensorParallel ? "; \"none\" = zero units (the rank adds zeros to the all-reduce)" : "", "\n");
  if (fp.backend == BackendKind::kCuda && options != nullptr) {
    const CudaRankReserve r = cuda_plan_reserve(fp, pages > 0 ? options->with_pages(pages) : *options);
    absl::StrAppend(&out, "workspace per CUDA rank (bound for the widest rank, ", options->step_tokens,
                    " tokens per step): forward ", format_bytes(r.workspace), ", scratch ", format_bytes(r.scratch),
                    ", RoPE ", format_bytes(r.engine), ", sampler ", format_bytes(r.sampler), ", cuBLAS ", format_bytes(r.allocator_fixed),
                    ", CUDA context ", format_bytes(r.context), ", NCCL ", format_bytes(r.nccl),
                    r.oneshot > 0 ? absl::StrCat(", one-shot all-reduce ", format_bytes(r.oneshot)) : "",
                    r.oneshot > 0 ? " (context, NCCL and the one-shot buffers are outside the worker's allocator; "
                                    "context and NCCL are estimates)\n"
                                  : " (context and NCCL are estimates outside the worker's allocator)\n");
  }
  for (const std::string& note : fp.notes) absl::StrAppend(&out, "note: ", note, "\n");
  return out;
}

}  // namespace exl3
