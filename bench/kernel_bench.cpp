// exl3-bench kernels: per-op timings of one decoder layer and the head on one backend (see
// kernel_bench.h).
#include "bench/kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_backend.h"
#include "bench/bench_report.h"
#include "kernels/backend.h"
#include "worker/kv_cache_bits.h"
#include "worker/model/config.h"
#include "worker/model/llama_model.h"
#include "worker/model/model_shard.h"


namespace exl3 {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status validate(const KernelBenchOptions& o) {
  if (o.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  if (o.backend != "cpu" && o.backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--backend must be cpu or cuda, not '", o.backend, "'"));
  }
  if (o.rows.empty()) return absl::InvalidArgumentError("--rows needs at least one row count");
  for (int64_t r : o.rows) {
    if (r < 1 || r > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("--rows: ", r, " is outside 1..1048576"));
    }
  }
  if (o.iters < 1) return absl::InvalidArgumentError("--iters must be at least 1");
  if (o.warmup < 0) return absl::InvalidArgumentError("--warmup must not be negative");
  if (o.timing != "auto" && o.timing != "graph" && o.timing != "host") {
    return absl::InvalidArgumentError(absl::StrCat("--timing must be graph or host, not '", o.timing, "'"));
  }
  if (o.repeats < 1) return absl::InvalidArgumentError("--repeats must be at least 1");
  if (o.attention_context < 1) return absl::InvalidArgumentError("attention context must be positive");
  EXL3_RETURN_IF_ERROR(parse_int8_activations(o.int8_activations, "--int8-activations").status());
  return parse_kv_cache_bits(o.cache_bits, "--cache-bits").status();
}

// "graph" or "host": the method `o.timing` asks for on `backend`.
absl::StatusOr<std::string> resolve_timing(const KernelBenchOptions& o, const Backend& backend) {
  if (o.timing == "auto") return std::string(backend.supports_step_graphs() ? "graph" : "host");
  if (o.timing == "graph" && !backend.supports_step_graphs()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timing graph: the ", o.backend, " backend has no step graphs (use --timing host)"));
  }
  return o.timing;
}

// One op's time per call.
struct MeasuredTime {
  double us = 0.0;
  std::optional<double> min_us;
  std::string method;  // graph | host
  std::string note;    // why a graph-timed op fell back to the host clock
};

// Times one op by the report's method (see kernel_bench.h).
class OpTimer {
 public:
  OpTimer(Backend& backend, const KernelBenchOptions& o, bool graph) : backend_(backend), o_(o), graph_(graph) {}

  absl::StatusOr<MeasuredTime> time(const std::function<void()>& op) {
    if (!graph_) return time_host(op);
    // Host calls first: kernels load and libraries pick their algorithms outside the capture.
    for (int i = 0; i < o_.warmup; ++i) op();
    if (absl::Status st = backend_.synchronize(); !st.ok()) return st;
    absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend_.capture_step([&]() {
      for (int i = 0; i < o_.iters; ++i) op();
      return absl::OkStatus();
    });
    if (!graph.ok()) {
      absl::StatusOr<MeasuredTime> host = time_host(op);
      if (host.ok()) host->note = absl::StrCat("graph capture failed, host-timed: ", graph.status().message());
      return host;
    }
    if (absl::Status st = replay(**graph); !st.ok()) return st;  // warm-up
    MeasuredTime t;
    t.method = "graph";
    double total = 0.0, best = 0.0;
    for (int r = 0; r < o_.repeats; ++r) {
      const Clock::time_point start = Clock::now();
      if (absl::Status st = replay(**graph); !st.ok()) return st;
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o_.iters;
      total += us;
      best = r == 0 ? us : std::min(best, us);
    }
    t.us = std::max(total / o_.repeats, 1e-3);
    t.min_us = std::max(best, 1e-3);
    return t;
  }

 private:
  absl::Status replay(StepGraph& graph) {
    if (absl::Status st = backend_.replay_step(graph); !st.ok()) return st;
    return backend_.synchronize();
  }

  // Mean microseconds of `iters` calls issued from the host after `warmup` calls, with the backend
  // synchronised before and after the timed loop.
  absl::StatusOr<MeasuredTime> time_host(const std::function<void()>& op) {
    for (int i = 0; i < o_.warmup; ++i) op();
    absl::Status st = backend_.synchronize();
    if (!st.ok()) return st;
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < o_.iters; ++i) op();
    st = backend_.synchronize();
    if (!st.ok()) return st;
    MeasuredTime t;
    t.method = "host";
    t.us = std::max(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o_.iters, 1e-3);
    return t;
  }

  Backend& backend_;
  const KernelBenchOptions& o_;
  bool graph_;
};

void set_time(OpTiming& t, const MeasuredTime& m) {
  t.us = m.us;
  t.min_us = m.min_us;
  t.timing = m.method;
  t.note = m.note;
}

struct NamedLinear {
  std::string name;
  const Linear* linear;
};

// Linears of one shape and storage, timed once.
struct LinearGroup {
  std::vector<std::string> names;
  const Linear* linear = nullptr;
};

std::vector<LinearGroup> distinct_linears(const std::vector<NamedLinear>& all) {
  std::vector<LinearGroup> groups;
  std::map<std::tuple<int64_t, int64_t, int, bool, int>, size_t> index;
  for (const NamedLinear& l : all) {
    const LinearInfo& i = l.linear->info();
    const auto key = std::make_tuple(i.in_features, i.out_features, i.bits, i.exl3, static_cast<int>(i.codebook));
    auto it = index.find(key);
    if (it == index.end()) {
      index.emplace(key, groups.size());
      groups.push_back({{l.name}, l.linear});
    } else {
      groups[it->second].names.push_back(l.name);
    }
  }
  return groups;
}

// Everything one row count needs, allocated from the backend.
class OpRunner {
 public:
  OpRunner(const LlamaModel& model, Backend& backend, const KernelBenchOptions& o, KvCacheBits cache_bits, bool graph)
      : model_(model),
        backend_(backend),
        o_(o),
        cache_bits_(cache_bits),
        c_(model.config()),
        timer_(backend, o, graph) {}

  absl::Status run_rows(int64_t rows, std::vector<OpTiming>& out) {
    const DType a = backend_.activation_dtype();
    const double as = static_cast<double>(dtype_size(a));
    const DecoderLayer& layer = model_.layer(0);

    std::vector<NamedLinear> linears = {{"q_proj", &layer.q},      {"k_proj", &layer.k},       {"v_proj", &layer.v},
                                        {"o_proj", &layer.o},      {"gate_proj", &layer.gate}, {"up_proj", &layer.up},
                                        {"down_proj", &layer.down}};
    if (model_.shard().has_head) linears.push_back({"lm_head", &model_.head()});
    for (const LinearGroup& g : distinct_linears(linears)) {
      const LinearWeights& w = g.linear->weights();
      absl::StatusOr<Tensor> x = backend_.allocate(a, {rows, w.in_features}, "bench x");
      if (!x.ok()) return x.status();
      absl::StatusOr<Tensor> y = backend_.allocate(a, {rows, w.out_features}, "bench y");
      if (!y.ok()) return y.status();
      absl::StatusOr<MeasuredTime> us = timer_.time([&]() { backend_.linear(w, *x, *y); });
      if (!us.ok()) return us.status();
      OpTiming t;
      t.op = "linear";
      t.names = g.names;
      t.rows = rows;
      t.in_features = w.in_features;
      t.out_features = w.out_features;
      t.bits = g.linear->info().bits;
      t.exl3 = g.linear->info().exl3;
      set_time(t, *us);
      t.bytes = static_cast<double>(w.bytes) + as * static_cast<double>(rows * (w.in_features + w.out_features));
      t.flops =
          2.0 * static_cast<double>(rows) * static_cast<double>(w.in_features) * static_cast<double>(w.out_features);
      out.push_back(t);
    }

    const int64_t hidden = c_.hidden_size;
    {
      absl::StatusOr<Tensor> x = backend_.allocate(a, {rows, hidden}, "bench norm x");
      if (!x.ok()) return x.status();
      absl::StatusOr<Tensor> y = backend_.allocate(a, {rows, hidden}, "bench norm out");
      if (!y.ok()) return y.status();
      const float eps = static_cast<float>(c_.rms_norm_eps);
      absl::StatusOr<MeasuredTime> us = timer_.time([&]() { backend_.rms_norm(*x, layer.input_norm, eps, *y); });
      if (!us.ok()) return us.status();
      out.push_back(
          elementwise("rms_norm", rows, hidden, *us, 2.0 * as * rows * hidden + 4.0 * hidden, 4.0 * rows * hidden));
    }
    {
      const int64_t inter = layer.gate.weights().out_features;
      absl::StatusOr<Tensor> g = backend_.allocate(a, {rows, inter}, "bench gate");
      if (!g.ok()) return g.status();
      absl::StatusOr<Tensor> u = backend_.allocate(a, {rows, inter}, "bench up");
      if (!u.ok()) return u.status();
      absl::StatusOr<Tensor> y = backend_.allocate(a, {rows, inter}, "bench silu out");
      if (!y.ok()) return y.status();
      absl::StatusOr<MeasuredTime> us = timer_.time([&]() { backend_.silu_mul(*g, *u, *y); });
      if (!us.ok()) return us.status();
      out.push_back(elementwise("silu_mul", rows, inter, *us, 3.0 * as * rows * inter, 5.0 * rows * inter));
    }
    {
      const int64_t heads = layer.heads;
      absl::StatusOr<Tensor> x = backend_.allocate(a, {rows, heads, c_.head_dim}, "bench rope x");
      if (!x.ok()) return x.status();
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % o_.attention_context);
      absl::StatusOr<Tensor> positions = upload(Tensor::from_vector(pos, {rows}), "bench rope positions");
      if (!positions.ok()) return positions.status();
      const RopeTables tables = compute_rope(c_);
      const int64_t half = static_cast<int64_t>(tables.inv_freq.size());
      absl::StatusOr<Tensor> inv_freq = upload(Tensor::from_vector(tables.inv_freq, {half}), "bench inv_freq");
      if (!inv_freq.ok()) return inv_freq.status();
      absl::StatusOr<MeasuredTime> us =
          timer_.time([&]() { backend_.rope(*x, *positions, *inv_freq, tables.attention_scaling); });
      if (!us.ok()) return us.status();
      const double elems = static_cast<double>(rows * heads * c_.head_dim);
      OpTiming t = elementwise("rope", rows, heads * c_.head_dim, *us, 2.0 * as * elems + 4.0 * rows, 3.0 * elems);
      out.push_back(t);
    }
    return time_attention(std::min(rows, o_.max_attention_seqs), out);
  }

 private:
  static OpTiming elementwise(const std::string& op, int64_t rows, int64_t features, const MeasuredTime& us,
                              double bytes, double flops) {
    OpTiming t;
    t.op = op;
    t.rows = rows;
    t.in_features = features;
    t.out_features = features;
    set_time(t, us);
    t.bytes = bytes;
    t.flops = flops;
    return t;
  }

  absl::StatusOr<Tensor> upload(const Tensor& host, const std::string& what) {
    absl::StatusOr<Tensor> t = backend_.allocate(host.dtype(), host.shape(), what);
    if (!t.ok()) return t.status();
    backend_.upload(host, *t);
    return t;
  }

  // `seqs` sequences of one decode token each at position context - 1, over distinct pages.
  absl::Status time_attention(int64_t seqs, std::vector<OpTiming>& out) {
    const DecoderLayer& layer = model_.layer(0);
    const int64_t page_size = 256;
    const int64_t pages_per_seq = (o_.attention_context + page_size - 1) / page_size;
    const int64_t kv_heads = layer.kv_heads, heads = layer.heads, hd = c_.head_dim;
    const DType a = backend_.activation_dtype();
    const int64_t num_pages = seqs * pages_per_seq;
    PagedKv cache;
    cache.page_size = page_size;
    cache.kv_heads = kv_heads;
    cache.head_dim = hd;
    cache.k_bits = cache_bits_.k;
    cache.v_bits = cache_bits_.v;
    if (absl::Status st = check_kv_token_dim(kv_heads * hd, cache_bits_); !st.ok()) return st;
    if (absl::Status st = allocate_side(cache.k_bits, num_pages, page_size, kv_heads, hd, "k", cache.k_pages,
                                        cache.k_words, cache.k_scales);
        !st.ok()) {
      return st;
    }
    if (absl::Status st = allocate_side(cache.v_bits, num_pages, page_size, kv_heads, hd, "v", cache.v_pages,
                                        cache.v_words, cache.v_scales);
        !st.ok()) {
      return st;
    }

    const size_t n = static_cast<size_t>(seqs);
    std::vector<int32_t> tokens(n, 1), positions(n, static_cast<int32_t>(o_.attention_context - 1)), token_seq(n);
    std::vector<int32_t> table(n * static_cast<size_t>(pages_per_seq));
    for (size_t s = 0; s < n; ++s) token_seq[s] = static_cast<int32_t>(s);
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    StepMeta meta;
    const std::pair<Tensor*, Tensor> uploads[] = {
        {&meta.tokens, Tensor::from_vector(tokens, {seqs})},
        {&meta.positions, Tensor::from_vector(positions, {seqs})},
        {&meta.token_seq, Tensor::from_vector(token_seq, {seqs})},
        {&meta.page_table, Tensor::from_vector(table, {seqs, pages_per_seq})},
        {&meta.logit_rows, Tensor::from_vector(token_seq, {seqs})},
    };
    for (const auto& [dst, host] : uploads) {
      absl::StatusOr<Tensor> t = upload(host, "bench step meta");
      if (!t.ok()) return t.status();
      *dst = *t;
    }
    meta.num_tokens = seqs;
    meta.num_seqs = seqs;
    meta.max_pages = pages_per_seq;
    meta.num_logit_rows = seqs;
    meta.max_position = static_cast<int32_t>(o_.attention_context - 1);

    absl::StatusOr<Tensor> q = backend_.allocate(a, {seqs, heads, hd}, "bench q");
    if (!q.ok()) return q.status();
    absl::StatusOr<Tensor> y = backend_.allocate(a, {seqs, heads, hd}, "bench attention out");
    if (!y.ok()) return y.status();
    absl::StatusOr<MeasuredTime> us = timer_.time([&]() { backend_.attention(*q, cache, meta, *y); });
    if (!us.ok()) return us.status();
    const double ctx = static_cast<double>(o_.attention_context);
    const uint64_t element_bytes = dtype_size(backend_.kv_dtype());
    const double kv_bytes = static_cast<double>(seqs) * ctx *
                            static_cast<double>(kv_token_bytes(kv_heads * hd, cache.k_bits, element_bytes) +
                                                kv_token_bytes(kv_heads * hd, cache.v_bits, element_bytes));
    OpTiming t = elementwise("attention", seqs, heads * hd, *us,
                             kv_bytes + 2.0 * seqs * heads * hd * static_cast<double>(dtype_size(a)),
                             4.0 * seqs * heads * ctx * hd);
    out.push_back(t);
    return absl::OkStatus();
  }

  // One side of the attention's cache: pages of the backend's kv_dtype at 16 bits (contents as
  // allocated), else I32 words and F16 scales uploaded as zeros (every value dequantizes to 0).
  absl::Status allocate_side(int bits, int64_t num_pages, int64_t page_size, int64_t kv_heads, int64_t hd,
                             const char* side, Tensor& pages, Tensor& words, Tensor& scales) {
    if (bits == 16) {
      absl::StatusOr<Tensor> t =
          backend_.allocate(backend_.kv_dtype(), {num_pages, page_size, kv_heads, hd}, absl::StrCat("bench ", side,
                                                                                                    " pages"));
      if (!t.ok()) return t.status();
      pages = *t;
      return absl::OkStatus();
    }
    const int64_t groups = kv_heads * hd / kKvGroupSize;
    absl::StatusOr<Tensor> w = upload(Tensor::zeros(DType::kI32, {num_pages, page_size, groups * bits}),
                                      absl::StrCat("bench ", side, " words"));
    if (!w.ok()) return w.status();
    absl::StatusOr<Tensor> sc =
        upload(Tensor::zeros(DType::kF16, {num_pages, page_size, groups}), absl::StrCat("bench ", side, " scales"));
    if (!sc.ok()) return sc.status();
    words = *w;
    scales = *sc;
    return absl::OkStatus();
  }

  const LlamaModel& model_;
  Backend& backend_;
  const KernelBenchOptions& o_;
  KvCacheBits cache_bits_;
  const ModelConfig& c_;
  OpTimer timer_;
};

nlohmann::json optional_number(const std::optional<double>& v) {
  return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The attention's cache widths (16,16 when --cache-bits does not parse: reports follow a run,
// which refused such options).
KvCacheBits cache_bits_or_full(const KernelBenchOptions& o) {
  absl::StatusOr<KvCacheBits> bits = parse_kv_cache_bits(o.cache_bits, "--cache-bits");
  return bits.ok() ? *bits : KvCacheBits{};
}

std::string timing_description(const KernelBenchOptions& o, const KernelBenchReport& r) {
  if (r.timing == "graph") {
    return absl::StrFormat(
        "graph (%d warm-up calls, then %d back-to-back calls captured in one step graph, one warm-up replay, "
        "per-call mean of %d timed replays, host clock around replay + synchronize)",
        o.warmup, o.iters, o.repeats);
  }
  return absl::StrFormat("host (mean of %d calls launched from the host after %d warm-up, launch overhead included)",
                         o.iters, o.warmup);
}

}  // namespace

std::optional<double> OpTiming::weights_per_ms() const {
  if (op != "linear" || !exl3) return std::nullopt;
  return static_cast<double>(in_features) * static_cast<double>(out_features) / us * 1e3;
}

absl::StatusOr<KernelBenchReport> run_kernel_bench(const KernelBenchOptions& o) {
  if (absl::Status st = validate(o); !st.ok()) return st;
  absl::StatusOr<std::shared_ptr<Backend>> backend = make_bench_backend(o.backend, o.device, o.int8_activations);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<std::string> timing = resolve_timing(o, **backend);
  if (!timing.ok()) return timing.status();
  absl::StatusOr<ModelConfig> config = load_model_config(o.model_dir);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<LlamaModel>> model =
      LlamaModel::load_shard(o.model_dir, ModelShard::full(*config), *backend);
  if (!model.ok()) return model.status();
  const int64_t max_rows = *std::max_element(o.rows.begin(), o.rows.end());
  StepLimits limits;
  limits.max_step_tokens = max_rows;
  limits.max_seqs = std::min(max_rows, o.max_attention_seqs);
  limits.max_pages_per_seq = (o.attention_context + 255) / 256;
  limits.max_logit_rows = max_rows;
  if (absl::Status st = (*model)->reserve(limits); !st.ok()) return st;

  KernelBenchReport report;
  Backend& b = **backend;
  report.timing = *timing;
  report.backend_description = b.description();
  report.activation_dtype = dtype_name(b.activation_dtype());
  report.kv_dtype = dtype_name(b.kv_dtype());
  const ModelConfig& c = (*model)->config();
  report.model = {{"dir", o.model_dir},
                  {"architecture", architecture_name(c.architecture)},
                  {"hidden_size", c.hidden_size},
                  {"intermediate_size", c.intermediate_size},
                  {"num_layers", c.num_layers},
                  {"num_heads", c.num_heads},
                  {"num_kv_heads", c.num_kv_heads},
                  {"head_dim", c.head_dim},
                  {"vocab_size", c.vocab_size},
                  {"decoder_bits_per_weight", (*model)->decoder_bits_per_weight()}};

  absl::StatusOr<MeasuredPeaks> peaks = o.backend == "cuda"
                                            ? measure_cuda_peaks(o.device, o.cuda_copy_bytes, o.gemm_n, o.iters)
                                            : measure_cpu_peaks(o.cpu_copy_bytes, o.iters);
  if (!peaks.ok()) return peaks.status();
  report.peaks = *peaks;

  absl::StatusOr<KvCacheBits> cache_bits = parse_kv_cache_bits(o.cache_bits, "--cache-bits");
  if (!cache_bits.ok()) return cache_bits.status();
  OpRunner runner(**model, b, o, *cache_bits, report.timing == "graph");
  for (int64_t rows : o.rows) {
    if (absl::Status st = runner.run_rows(rows, report.ops); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("rows ", rows, ": ", st.message()));
    }
  }
  return report;
}

nlohmann::json kernel_bench_json(const KernelBenchOptions& o, const KernelBenchReport& r) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpTiming& t : r.ops) {
    ops.push_back({{"op", t.op},
                   {"linears", t.names},
                   {"rows", t.rows},
                   {"in_features", t.in_features},
                   {"out_features", t.out_features},
                   {"bits", t.bits},
                   {"exl3", t.exl3},
                   {"us", t.us},
                   {"min_us", optional_number(t.min_us)},
                   {"timing", t.timing},
                   {"note", t.note},
                   {"bytes", t.bytes},
                   {"gb_per_s", t.gb_per_s()},
                   {"flop_per_s", t.flop_per_s()},
                   {"copy_peak_fraction", t.gb_per_s() / r.peaks.copy_gb_per_s},
                   {"gemm_peak_fraction", r.peaks.gemm_flop_per_s.has_value()
                                              ? nlohmann::json(t.flop_per_s() / *r.peaks.gemm_flop_per_s)
                                              : nlohmann::json(nullptr)},
                   {"weights_per_ms", optional_number(t.weights_per_ms())}});
  }
  return {{"mode", "kernels"},
          {"environment", capture_environment(o.backend, o.device, o.argv)},
          {"backend",
           {{"name", o.backend},
            {"device", o.device},
            {"description", r.backend_description},
            {"activation_dtype", r.activation_dtype},
            {"kv_dtype", r.kv_dtype}}},
          {"model", r.model},
          {"timing",
           {{"method", r.timing},
            {"description", timing_description(o, r)},
            {"iters", o.iters},
            {"warmup", o.warmup},
            {"repeats", o.repeats}}},
          {"iters", o.iters},
          {"warmup", o.warmup},
          {"rows", o.rows},
          {"attention_context", o.attention_context},
          {"cache_bits", kv_cache_bits_name(cache_bits_or_full(o))},
          {"int8_activations", o.int8_activations},
          {"peaks",
           {{"copy_gb_per_s", r.peaks.copy_gb_per_s},
            {"copy_bytes", r.peaks.copy_bytes},
            {"gemm_flop_per_s", optional_number(r.peaks.gemm_flop_per_s)},
            {"gemm_n", r.peaks.gemm_n}}},
          {"ops", ops}};
}

std::string kernel_bench_markdown(const KernelBenchOptions& o, const KernelBenchReport& r) {
  std::string md = absl::StrFormat("### exl3-bench kernels: %s on %s\n\n", o.model_dir, r.backend_description);
  absl::StrAppendFormat(&md, "Copy peak %.1f GB/s (read + write of %.0f MiB)", r.peaks.copy_gb_per_s,
                        static_cast<double>(r.peaks.copy_bytes) / (1 << 20));
  if (r.peaks.gemm_flop_per_s.has_value()) {
    absl::StrAppendFormat(&md, "; fp16 GEMM %lld^3 peak %.1f TFLOP/s", static_cast<long long>(r.peaks.gemm_n),
                          *r.peaks.gemm_flop_per_s / 1e12);
  }
  absl::StrAppendFormat(&md, ". Timing: %s. Attention: decode, context %lld, cache %s.\n\n",
                        timing_description(o, r), static_cast<long long>(o.attention_context),
                        cache_bits_or_full(o).quantized()
                            ? absl::StrCat("bits ", kv_cache_bits_name(cache_bits_or_full(o)))
                            : absl::StrCat(r.kv_dtype, " pages"));
  md +=
      "| op | rows | in x out / width | bits | µs | min µs | timing | MB moved | GB/s | % copy peak | GFLOP/s "
      "| % GEMM peak | Mweights/ms |\n";
  md += "|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
  std::vector<std::string> notes;
  for (const OpTiming& t : r.ops) {
    const std::string name = t.names.empty() ? t.op : absl::StrJoin(t.names, ", ");
    const std::string gemm = r.peaks.gemm_flop_per_s.has_value()
                                 ? absl::StrFormat("%.1f", 100.0 * t.flop_per_s() / *r.peaks.gemm_flop_per_s)
                                 : "-";
    const std::optional<double> wpm = t.weights_per_ms();
    const std::string shape =
        t.op == "linear" ? absl::StrCat(t.in_features, "x", t.out_features) : absl::StrCat(t.in_features);
    std::string timing = t.timing;
    if (!t.note.empty()) {
      notes.push_back(
          absl::StrFormat("%d. %s, rows %lld: %s", notes.size() + 1, name, static_cast<long long>(t.rows), t.note));
      timing = absl::StrFormat("%s (note %d)", t.timing, notes.size());
    }
    absl::StrAppendFormat(&md, "| %s | %lld | %s | %s | %.2f | %s | %s | %.2f | %.1f | %.1f | %.1f | %s | %s |\n", name,
                          static_cast<long long>(t.rows), shape, t.bits > 0 ? absl::StrCat(t.bits) : "-", t.us,
                          t.min_us.has_value() ? absl::StrFormat("%.2f", *t.min_us) : "-", timing, t.bytes / 1e6,
                          t.gb_per_s(), 100.0 * t.gb_per_s() / r.peaks.copy_gb_per_s, t.flop_per_s() / 1e9, gemm,
                          wpm.has_value() ? absl::StrFormat("%.1f", *wpm / 1e6) : "-");
  }
  if (!notes.empty()) md += "\n" + absl::StrJoin(notes, "\n") + "\n";
  return md;
}

absl::Status run_kernel_bench_command(const KernelBenchOptions& o, std::FILE* log) {
  absl::StatusOr<KernelBenchReport> report = run_kernel_bench(o);
  if (!report.ok()) return report.status();
  const std::string md = kernel_bench_markdown(o, *report);
  if (log != nullptr) std::fputs(md.c_str(), log);
  if (!o.json_path.empty()) {
    if (absl::Status st = write_report_file(o.json_path, kernel_bench_json(o, *report).dump(2) + "\n"); !st.ok()) {
      return st;
    }
  }
  if (!o.markdown_path.empty()) return write_report_file(o.markdown_path, md);
  return absl::OkStatus();
}

void add_kernels_subcommand(CLI::App& app, KernelBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "kernels",
      "Time the ops of layer 0 (each distinct linear), the head, rms_norm, silu_mul, rope and decode attention of "
      "a model on one backend, per row count, against the copy-bandwidth and GEMM peaks measured in the same run.");
  cmd->add_option("--model", o.model_dir, "EXL3 model directory")->required();
  cmd->add_option("--backend", o.backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--device", o.device, "CUDA device index")->check(CLI::Range(0, 1023))->capture_default_str();
  cmd->add_option("--rows", o.rows,
                  "Row counts of x, comma-separated (attention: that many decode sequences, at "
                  "most 256)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--iters", o.iters, "Timed calls per op (after the warm-up)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed calls per op first")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_option("--timing", o.timing,
                  "graph: time replays of a step graph of --iters calls (device time, no launch overhead); host: "
                  "time --iters calls launched from the host; auto: graph when the backend has step graphs")
      ->check(CLI::IsMember({"auto", "graph", "host"}))
      ->capture_default_str();
  cmd->add_option("--repeats", o.repeats, "Graph timing: timed replays (mean and min reported)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--context", o.attention_context, "Context length of the decode attention")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--cache-bits", o.cache_bits,
                  "Cache widths of the decode attention: K,V each 2..8 or 16 (or N for N,N); 16: pages of the "
                  "backend's kv_dtype")
      ->capture_default_str();
  o.int8_activations = "off";
  cmd->add_option("--int8-activations", o.int8_activations, int8_activations_flag_help())
      ->check(CLI::IsMember({"off", "auto", "on"}))
      ->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write the results as JSON here");
  cmd->add_option("--markdown", o.markdown_path, "Write the markdown table here");
  cmd->callback([&o]() {
    if (absl::Status st = run_kernel_bench_command(o, stdout); !st.ok()) {
      std::fprintf(stderr, "exl3-bench kernels: error: %s\n", st.ToString().c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace exl3
