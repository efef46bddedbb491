// exl3-bench model (see model_bench.h): copy bandwidth, model load, prefill and decode timing
// through the Engine, roofline figures, reports.
#include "bench/model_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_report.h"
#include "bench/model_bench_ranks.h"
#include "kernels/check.h"
#include "worker/comm/all_reduce_mode.h"
#include "worker/comm/in_memory_store.h"
#include "worker/engine.h"
#include "worker/kv_cache_bits.h"
#include "worker/loader/safetensors.h"
#include "worker/model/config.h"
#include "worker/model/llama_model.h"
#include "worker/model/model_shard.h"

#ifdef EXL3_HAVE_CUDA
#include <cuda_runtime.h>

#include "bench/bench_cuda.h"
#endif

namespace exl3 {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void logf(const ModelBenchOptions& o, const std::string& line) {
  if (o.log == nullptr) return;
  std::fprintf(o.log, "exl3-bench model: %s\n", line.c_str());
  std::fflush(o.log);
}

// Host memcpy of 256 MiB, best of a few runs; bytes read + written per second (1e9).
double cpu_copy_bandwidth_gbs() {
  const size_t bytes = size_t{256} << 20;
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 0, bytes);
  double best = 0.0;
  for (int rep = 0; rep < 4; ++rep) {
    const Clock::time_point t0 = Clock::now();
    std::memcpy(dst.get(), src.get(), bytes);
    const double s = seconds_since(t0);
    if (rep > 0 && s > 0.0) best = std::max(best, 2.0 * bytes / s / 1e9);
  }
  return best;
}

#ifdef EXL3_HAVE_CUDA
// Device-to-device cudaMemcpyAsync of 1 GiB timed with events, best of a few runs; bytes read +
// written per second (1e9), as docs/hardware.md counts copy bandwidth.
absl::StatusOr<double> cuda_copy_bandwidth_gbs(int device) {
  const size_t bytes = size_t{1} << 30;
  EXL3_RETURN_IF_ERROR(select_cuda_device(device));
  void* src = nullptr;
  void* dst = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto release = [&]() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (src != nullptr) cudaFree(src);
    if (dst != nullptr) cudaFree(dst);
  };
  absl::Status st = cuda_status(cudaMalloc(&src, bytes), "cudaMalloc (copy bandwidth source, 1 GiB)");
  if (st.ok()) st = cuda_status(cudaMalloc(&dst, bytes), "cudaMalloc (copy bandwidth destination, 1 GiB)");
  if (st.ok()) st = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (st.ok()) st = cuda_status(cudaEventCreate(&start), "cudaEventCreate");
  if (st.ok()) st = cuda_status(cudaEventCreate(&stop), "cudaEventCreate");
  if (st.ok()) st = cuda_status(cudaMemsetAsync(src, 1, bytes, stream), "cudaMemsetAsync");
  double best = 0.0;
  for (int rep = 0; st.ok() && rep < 6; ++rep) {
    st = cuda_status(cudaEventRecord(start, stream), "cudaEventRecord");
    if (st.ok()) st = cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    if (st.ok()) st = cuda_status(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (st.ok()) st = cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    if (st.ok()) st = cuda_status(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (st.ok() && rep > 0 && ms > 0.0f) best = std::max(best, 2.0 * bytes / (ms * 1e-3) / 1e9);
  }
  release();
  if (!st.ok()) return st;
  return best;
}
#endif

// Sum of k·n over the EXL3 linears (every `*.trellis`, shape (k/16, n/16, 16K)).
absl::StatusOr<uint64_t> count_exl3_weights(const std::string& model_dir) {
  EXL3_ASSIGN_OR_RETURN(SafetensorsCollection tensors, SafetensorsCollection::open_dir(model_dir));
  uint64_t total = 0;
  const std::string suffix = ".trellis";
  for (const std::string& name : tensors.names()) {
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const TensorInfo* info = tensors.find(name);
    if (info == nullptr || info->shape.size() != 3) continue;
    total += static_cast<uint64_t>(info->shape[0]) * 16 * static_cast<uint64_t>(info->shape[1]) * 16;
  }
  return total;
}

// Bytes attention reads per step for sequences whose new tokens sit at `positions`: keys and
// values of positions 0..p in every layer, each token's K and V vectors at the cache's widths
// (element_bytes a full-precision element; quantized words and scales otherwise).
uint64_t kv_bytes_read(const ModelConfig& c, const std::vector<int64_t>& positions, const KvCacheBits& bits,
                       uint64_t element_bytes) {
  uint64_t attended = 0;
  for (int64_t p : positions) attended += static_cast<uint64_t>(p + 1);
  const int64_t token_dim = c.num_kv_heads * c.head_dim;
  const uint64_t token_bytes =
      kv_token_bytes(token_dim, bits.k, element_bytes) + kv_token_bytes(token_dim, bits.v, element_bytes);
  return static_cast<uint64_t>(c.num_layers) * attended * token_bytes;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Deterministic prompt tokens in [2, vocab) (away from the usual BOS/EOS ids).
std::vector<int32_t> prompt_tokens(int64_t n, int64_t vocab, uint64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  const uint64_t range = static_cast<uint64_t>(std::max<int64_t>(vocab - 2, 1));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ (salt * 0xBF58476D1CE4E5B9ull);
    t[static_cast<size_t>(i)] = static_cast<int32_t>(2 + (h >> 17) % range);
  }
  return t;
}

std::vector<int32_t> page_range(int64_t first, int64_t count) {
  std::vector<int32_t> p(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>(first + i);
  return p;
}

// One synchronised step; returns its wall time in seconds.
absl::StatusOr<double> timed_step(Engine& engine, const StepInput& input, StepOutput* out) {
  Backend& be = engine.model().backend();
  EXL3_RETURN_IF_ERROR(be.synchronize());
  const Clock::time_point t0 = Clock::now();
  EXL3_ASSIGN_OR_RETURN(StepOutput o, engine.run_step(input));
  EXL3_RETURN_IF_ERROR(be.synchronize());
  const double s = seconds_since(t0);
  if (out != nullptr) *out = std::move(o);
  return s;
}

absl::StatusOr<PrefillRow> bench_prefill(Engine& engine, const ModelBenchOptions& o, int64_t length,
                                         uint64_t& next_id) {
  const ModelConfig& c = engine.model().config();
  const std::vector<int32_t> pages = page_range(0, ceil_div(length, o.page_size));
  double total = 0.0;
  for (int run = 0; run < o.warmup + o.prefill_repeats; ++run) {
    const uint64_t id = next_id++;
    StepInput in;
    in.sequences.push_back(greedy_step_sequence(id, prompt_tokens(length, c.vocab_size, id), 0, pages, true,
                                                static_cast<int32_t>(length)));
    EXL3_ASSIGN_OR_RETURN(double s, timed_step(engine, in, nullptr));
    engine.release({id});
    if (run >= o.warmup) total += s;
  }
  PrefillRow row;
  row.tokens = length;
  row.seconds = total / o.prefill_repeats;
  row.tokens_per_s = row.seconds > 0.0 ? length / row.seconds : 0.0;
  return row;
}

// Runs the prompts of `seqs` (each its tokens from its start_pos, sampling after the last) in steps
// of at most `step_tokens` tokens: the sequences in order, a prompt longer than what a step has left
// in pieces. Returns each sequence's first sampled token, in the order of `seqs`.
absl::StatusOr<std::vector<int32_t>> prefill_prompts(Engine& engine, const std::vector<StepSequence>& seqs,
                                                     int64_t step_tokens) {
  std::vector<int32_t> first(seqs.size(), -1);
  std::vector<size_t> done(seqs.size(), 0);  // prompt tokens run so far
  size_t next = 0;                           // the first sequence with prompt tokens left
  while (next < seqs.size()) {
    StepInput in;
    std::vector<size_t> sampling;  // the sequence of each sampling piece, in input order
    size_t room = static_cast<size_t>(step_tokens);
    for (size_t i = next; i < seqs.size() && room > 0; ++i) {
      const StepSequence& s = seqs[i];
      const size_t take = std::min(s.tokens.size() - done[i], room);
      StepSequence piece = s;
      piece.tokens.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(done[i]),
                          s.tokens.begin() + static_cast<std::ptrdiff_t>(done[i] + take));
      piece.start_pos = s.start_pos + static_cast<int32_t>(done[i]);
      piece.sample = done[i] + take == s.tokens.size();
      if (piece.sample) sampling.push_back(i);
      in.sequences.push_back(std::move(piece));
      done[i] += take;
      room -= take;
    }
    while (next < seqs.size() && done[next] == seqs[next].tokens.size()) ++next;
    StepOutput out;
    EXL3_RETURN_IF_ERROR(timed_step(engine, in, &out).status());
    if (out.tokens.size() != sampling.size()) {
      return absl::InternalError(absl::StrCat("prefilling the decode prompts: ", out.tokens.size(),
                                              " sampled sequences came back, ", sampling.size(), " expected"));
    }
    for (size_t k = 0; k < sampling.size(); ++k) first[sampling[k]] = out.tokens[k].second.at(0);
  }
  return first;
}

// The timing and KV figures of one decode row; the roofline (weights over every rank) comes later
// (add_roofline).
absl::StatusOr<DecodeRow> bench_decode(Engine& engine, const ModelBenchOptions& o, int64_t batch, uint64_t& next_id) {
  const ModelConfig& c = engine.model().config();
  const uint64_t kv_element = dtype_size(engine.model().backend().kv_dtype());
  const int64_t positions = o.decode_prompt + o.warmup + o.decode_steps;
  const int64_t pages_per_seq = ceil_div(positions, o.page_size);
  std::vector<StepSequence> seqs;
  for (int64_t b = 0; b < batch; ++b) {
    const uint64_t id = next_id++;
    seqs.push_back(greedy_step_sequence(id, prompt_tokens(o.decode_prompt, c.vocab_size, id), 0,
                                        page_range(b * pages_per_seq, pages_per_seq), true,
                                        static_cast<int32_t>(o.decode_prompt)));
  }
  std::vector<uint64_t> ids;
  for (const StepSequence& s : seqs) ids.push_back(s.seq_id);

  // The prompts in steps of at most --decode-prompt-chunk tokens, then single-token greedy steps
  // fed with the sampled tokens.
  absl::StatusOr<std::vector<int32_t>> first = prefill_prompts(engine, seqs, o.decode_prompt_chunk);
  absl::Status status = first.status();
  std::vector<int32_t> sampled = first.ok() ? *std::move(first) : std::vector<int32_t>();
  StepInput in;
  StepOutput out;
  double total = 0.0;
  uint64_t kv_total = 0;
  double context_total = 0.0;
  for (int step = 0; status.ok() && step < o.warmup + o.decode_steps; ++step) {
    std::vector<int64_t> step_positions;
    for (size_t i = 0; i < seqs.size(); ++i) {
      StepSequence& s = seqs[i];
      s.start_pos += static_cast<int32_t>(s.tokens.size());
      s.tokens = {sampled[i]};
      step_positions.push_back(s.start_pos);
    }
    in.sequences = seqs;
    absl::StatusOr<double> t = timed_step(engine, in, &out);
    if (!t.ok()) {
      status = t.status();
      break;
    }
    for (size_t i = 0; i < seqs.size(); ++i) sampled[i] = out.tokens.at(i).second.at(0);
    if (step < o.warmup) continue;
    total += *t;
    kv_total += kv_bytes_read(c, step_positions, engine.cache_shape().bits(), kv_element);
    for (int64_t p : step_positions) context_total += static_cast<double>(p + 1);
  }
  engine.release(ids);
  EXL3_RETURN_IF_ERROR(status);

  DecodeRow row;
  row.batch = batch;
  row.steps = o.decode_steps;
  row.mean_context = context_total / (static_cast<double>(o.decode_steps) * batch);
  const double step_s = total / o.decode_steps;
  row.step_ms = step_s * 1e3;
  row.tokens_per_s = step_s > 0.0 ? batch / step_s : 0.0;
  row.kv_bytes = kv_total / static_cast<uint64_t>(o.decode_steps);
  return row;
}

// Bytes read per step (the weights every rank holds, the KV cache) over the step time, against
// `bandwidth_gbs` (the copy bandwidth of all the ranks' devices together).
void add_roofline(DecodeRow& row, const ModelBenchModelInfo& info, double bandwidth_gbs) {
  const double step_s = row.step_ms / 1e3;
  row.weight_bytes = info.weight_bytes;
  row.gbs = step_s > 0.0 ? static_cast<double>(row.weight_bytes + row.kv_bytes) / step_s / 1e9 : 0.0;
  row.copy_fraction = bandwidth_gbs > 0.0 ? row.gbs / bandwidth_gbs : 0.0;
  if (row.batch == 1 && row.step_ms > 0.0) {
    row.exl3_weights_per_ms = static_cast<double>(info.exl3_weights) / row.step_ms;
  }
}

// What one rank measured and holds.
struct RankOutcome {
  absl::Status status;
  std::string backend_description;
  uint64_t stored_bytes = 0;
  uint64_t weight_bytes = 0;
  double decoder_bpw = 0.0;
  std::vector<PrefillRow> prefill;
  std::vector<DecodeRow> decode;
  int64_t graph_captures = 0;
  int64_t graph_replays = 0;
};

// One rank's whole run: backend, communicator, its shard, an engine, then every measurement in
// the same order as every other rank (their collectives keep them in step). Rank 0 logs.
void run_rank(const ModelBenchOptions& o, int rank, const ModelShard& shard, const EngineOptions& eo,
              RendezvousStore& store, RankOutcome& out) {
  ModelBenchOptions ro = o;
  if (rank != 0) ro.log = nullptr;
  const auto fail = [&](const absl::Status& status) {
    out.status = o.ranks == 1 ? status
                              : absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
  };
  absl::StatusOr<std::shared_ptr<Backend>> backend = make_rank_backend(ro, rank);
  if (!backend.ok()) return fail(backend.status());
  out.backend_description = (*backend)->description();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = make_bench_communicator(ro, rank, **backend, store);
  if (!comm.ok()) return fail(comm.status());
  logf(ro, absl::StrCat("loading ", o.model_dir, o.ranks > 1 ? absl::StrCat(" (rank 0 of ", o.ranks, ")") : "",
                        " on ", out.backend_description));
  const Clock::time_point load_t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::load_shard(o.model_dir, shard, *backend);
  if (!model.ok()) return fail(model.status());
  out.decoder_bpw = (*model)->decoder_bits_per_weight();
  out.stored_bytes = (*model)->stored_bytes();
  out.weight_bytes = (*model)->allocated_bytes();
  logf(ro, absl::StrFormat("loaded in %.1f s: %.3f GB held by the backend, %.3f bpw", seconds_since(load_t0),
                           out.weight_bytes / 1e9, out.decoder_bpw));
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::create(*std::move(model), eo, comm->get());
  if (!engine.ok()) return fail(engine.status());
  logf(ro, absl::StrFormat("KV cache %.3f GB (%d pages of %d)", (*engine)->cache_bytes() / 1e9, eo.num_pages,
                           eo.page_size));
  uint64_t next_id = 1;
  for (int64_t length : o.prefill) {
    absl::StatusOr<PrefillRow> row = bench_prefill(**engine, o, length, next_id);
    if (!row.ok()) return fail(row.status());
    logf(ro, absl::StrFormat("prefill %6d tokens: %9.2f ms, %10.1f tokens/s", row->tokens, row->seconds * 1e3,
                             row->tokens_per_s));
    out.prefill.push_back(*row);
  }
  for (int64_t batch : o.batch) {
    absl::StatusOr<DecodeRow> row = bench_decode(**engine, o, batch, next_id);
    if (!row.ok()) return fail(row.status());
    logf(ro, absl::StrFormat("decode batch %3d: %8.3f ms/step, %10.1f tokens/s", row->batch, row->step_ms,
                             row->tokens_per_s));
    out.decode.push_back(*row);
  }
  // What the decode steps actually replayed (0 on the CPU backend or with --step-graphs off).
  out.graph_captures = (*engine)->model().step_graph_count();
  out.graph_replays = (*engine)->model().graph_replays();
}

// The ranks' failures in one status: a rank that failed on its own (say, loading) first, since the
// others then fail waiting for it in a collective (deadline, unavailable peer, communicator down).
absl::Status first_failure(const std::vector<RankOutcome>& outcomes) {
  const auto waited = [](const absl::Status& s) {
    return absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s) || absl::IsFailedPrecondition(s);
  };
  const RankOutcome* cause = nullptr;
  std::string others;
  for (const RankOutcome& out : outcomes) {
    if (out.status.ok()) continue;
    if (cause == nullptr || (waited(cause->status) && !waited(out.status))) cause = &out;
  }
  if (cause == nullptr) return absl::OkStatus();
  for (const RankOutcome& out : outcomes) {
    if (!out.status.ok() && &out != cause) absl::StrAppend(&others, "; then ", out.status.message());
  }
  return absl::Status(cause->status.code(), absl::StrCat(cause->status.message(), others));
}

}  // namespace

absl::Status validate_model_bench_options(const ModelBenchOptions& o) {
  if (o.backend != "cpu" && o.backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--backend: unknown backend '", o.backend, "' (cpu or cuda)"));
  }
  if (o.device < 0) return absl::InvalidArgumentError(absl::StrCat("--device: ", o.device, " is negative"));
  EXL3_RETURN_IF_ERROR(parse_int8_activations(o.int8_activations, "--int8-activations").status());
  std::error_code ec;
  if (o.model_dir.empty() || !fs::is_directory(o.model_dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--model: '", o.model_dir, "' is not a directory"));
  }
  if (!fs::exists(fs::path(o.model_dir) / "config.json", ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--model: ", o.model_dir, " has no config.json"));
  }
  if (o.prefill.empty() && o.batch.empty()) {
    return absl::InvalidArgumentError("--prefill and --batch are both empty: nothing to measure");
  }
  for (int64_t p : o.prefill) {
    if (p < 1) return absl::InvalidArgumentError(absl::StrCat("--prefill: length ", p, " must be >= 1"));
  }
  for (int64_t b : o.batch) {
    if (b < 1) return absl::InvalidArgumentError(absl::StrCat("--batch: batch size ", b, " must be >= 1"));
  }
  if (o.decode_steps < 1) return absl::InvalidArgumentError("--decode-steps must be >= 1");
  if (o.warmup < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
  if (o.prefill_repeats < 1) return absl::InvalidArgumentError("--prefill-repeats must be >= 1");
  if (o.decode_prompt < 1) return absl::InvalidArgumentError("--decode-prompt must be >= 1");
  if (o.decode_prompt_chunk < 1) return absl::InvalidArgumentError("--decode-prompt-chunk must be >= 1");
  if (o.page_size < 1) return absl::InvalidArgumentError("--page-size must be >= 1");
  EXL3_RETURN_IF_ERROR(parse_kv_cache_bits(o.cache_bits, "--cache-bits").status());
  return validate_bench_ranks(o);
}

absl::StatusOr<ModelBenchResult> run_model_bench(const ModelBenchOptions& o) {
  EXL3_RETURN_IF_ERROR(validate_model_bench_options(o));
  ModelBenchResult result;
  const int device0 = bench_rank_device(o, 0);
  result.environment = capture_environment(o.backend, device0, o.argv);
  result.environment["step_graphs"] = o.step_graphs ? "on" : "off";
  result.environment["int8_activations"] = o.int8_activations;
  EXL3_ASSIGN_OR_RETURN(const KvCacheBits cache_bits, parse_kv_cache_bits(o.cache_bits, "--cache-bits"));
  result.environment["cache_bits"] = kv_cache_bits_name(cache_bits);
  result.environment["ranks"] = o.ranks;
  if (o.ranks > 1) {
    result.environment["mode"] = o.mode;
    result.environment["split_gib"] = o.split;
    if (o.backend == "cuda") {
      std::vector<int> devices;
      for (int r = 0; r < o.ranks; ++r) devices.push_back(bench_rank_device(o, r));
      result.environment["devices"] = devices;
      result.environment["all_reduce"] = o.all_reduce;
      if (o.all_reduce == "oneshot") result.environment["all_reduce_oneshot_max_kib"] = o.all_reduce_oneshot_max_kib;
    }
  }

  // Copy bandwidth first, while the device memory is still free (rank 0's device; GPU ranks are
  // taken to be alike).
  if (o.backend == "cuda") {
#ifdef EXL3_HAVE_CUDA
    EXL3_ASSIGN_OR_RETURN(result.copy_bandwidth_gbs, cuda_copy_bandwidth_gbs(device0));
#endif
  } else {
    result.copy_bandwidth_gbs = cpu_copy_bandwidth_gbs();
  }
  logf(o, absl::StrFormat("copy bandwidth %.1f GB/s (read + written)", result.copy_bandwidth_gbs));

  EXL3_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(o.model_dir));
  // One engine per rank for every measurement, sized for the largest of them.
  const int64_t max_prefill = o.prefill.empty() ? 1 : *std::max_element(o.prefill.begin(), o.prefill.end());
  const int64_t max_batch = o.batch.empty() ? 1 : *std::max_element(o.batch.begin(), o.batch.end());
  const int64_t decode_positions = o.decode_prompt + o.warmup + o.decode_steps;
  const int64_t decode_pages = max_batch * ceil_div(decode_positions, o.page_size);
  EngineOptions eo;
  eo.page_size = o.page_size;
  eo.num_pages = std::max(ceil_div(max_prefill, o.page_size), decode_pages);
  eo.max_step_tokens = std::max(max_prefill, std::min(max_batch * o.decode_prompt, o.decode_prompt_chunk));
  eo.max_seqs = max_batch;
  eo.max_logit_rows = max_batch;
  eo.step_graphs = o.step_graphs;
  eo.cache_bits = cache_bits;
  EXL3_ASSIGN_OR_RETURN(const std::vector<ModelShard> shards,
                        plan_bench_shards(o, config, eo, std::max(max_prefill, decode_positions)));
  if (o.ranks > 1) {
    logf(o, absl::StrCat(o.ranks, " ranks, ", o.mode == "tp" ? "tensor parallel" : "layer split",
                         o.backend == "cuda" ? absl::StrCat(", all-reduce ", o.all_reduce) : ", Gloo"));
  }

  std::vector<RankOutcome> outcomes(static_cast<size_t>(o.ranks));
  InMemoryStore store;
  if (o.ranks == 1) {
    run_rank(o, 0, shards[0], eo, store, outcomes[0]);
  } else {
    std::vector<std::thread> threads;
    for (int r = 0; r < o.ranks; ++r) {
      threads.emplace_back(
          [&, r] { run_rank(o, r, shards[static_cast<size_t>(r)], eo, store, outcomes[static_cast<size_t>(r)]); });
    }
    for (std::thread& t : threads) t.join();
  }
  EXL3_RETURN_IF_ERROR(first_failure(outcomes));

  const RankOutcome& first = outcomes[0];
  ModelBenchModelInfo& info = result.model;
  info.name = fs::path(o.model_dir).lexically_normal().filename().string();
  if (info.name.empty()) info.name = fs::path(o.model_dir).lexically_normal().parent_path().filename().string();
  info.architecture = config.architecture_name;
  info.hidden_size = config.hidden_size;
  info.intermediate_size = config.intermediate_size;
  info.num_layers = config.num_layers;
  info.num_heads = config.num_heads;
  info.num_kv_heads = config.num_kv_heads;
  info.head_dim = config.head_dim;
  info.vocab_size = config.vocab_size;
  info.decoder_bpw = first.decoder_bpw;
  for (const RankOutcome& out : outcomes) {
    info.stored_bytes += out.stored_bytes;
    info.weight_bytes += out.weight_bytes;
  }
  EXL3_ASSIGN_OR_RETURN(info.exl3_weights, count_exl3_weights(o.model_dir));
  result.backend_description = first.backend_description;
  if (o.ranks > 1) absl::StrAppend(&result.backend_description, " on each of ", o.ranks, " ranks");
  // GPU ranks read their weights each at its own device's bandwidth; CPU ranks share the host's.
  const double bandwidth = result.copy_bandwidth_gbs * (o.backend == "cuda" ? o.ranks : 1);
  result.environment["roofline_bandwidth_gbs"] = bandwidth;

  // Rank 0's times: the collectives of every step keep the ranks in step.
  result.prefill = first.prefill;
  for (DecodeRow row : first.decode) {
    add_roofline(row, info, bandwidth);
    logf(o, absl::StrFormat("roofline batch %3d: %7.1f GB/s, %.1f%% of copy%s", row.batch, row.gbs,
                            100.0 * row.copy_fraction, o.ranks > 1 && o.backend == "cuda" ? " x ranks" : ""));
    result.decode.push_back(row);
  }
  result.environment["step_graph_captures"] = first.graph_captures;
  result.environment["step_graph_replays"] = first.graph_replays;
  logf(o, absl::StrFormat("step graphs %s: %d captured, %d replays", o.step_graphs ? "on" : "off",
                          first.graph_captures, first.graph_replays));

  if (!o.json_path.empty()) {
    EXL3_RETURN_IF_ERROR(write_report_file(o.json_path, model_bench_json(result).dump(2) + "\n"));
    logf(o, absl::StrCat("wrote ", o.json_path));
  }
  if (!o.markdown_path.empty()) {
    EXL3_RETURN_IF_ERROR(write_report_file(o.markdown_path, model_bench_markdown(result)));
    logf(o, absl::StrCat("wrote ", o.markdown_path));
  }
  return result;
}

void add_model_bench_command(CLI::App& app, ModelBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "model",
      "Load a model on one device, or sharded over --ranks ranks (tensor parallel or a layer split), and measure "
      "prefill tokens/s per prompt length and decode tokens/s per batch size (greedy), with a memory roofline per "
      "decode row against a copy bandwidth measured in the same run (times the GPU count for GPU ranks).");
  cmd->add_option("--model", o.model_dir, "EXL3 model directory (config.json + safetensors)")->required();
  cmd->add_option("--backend", o.backend, "cpu or cuda")->capture_default_str();
  cmd->add_option("--device", o.device, "CUDA device index")->capture_default_str();
  cmd->add_option("--prefill", o.prefill, "Prompt lengths, comma-separated; each runs as one chunk")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--batch", o.batch, "Decode batch sizes, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--decode-steps", o.decode_steps, "Measured decode steps per batch size")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Unmeasured runs before each measurement")->capture_default_str();
  cmd->add_option("--prefill-repeats", o.prefill_repeats, "Measured prefills per length (mean reported)")
      ->capture_default_str();
  cmd->add_option("--decode-prompt", o.decode_prompt, "Prompt tokens of each decode sequence")->capture_default_str();
  cmd->add_option("--decode-prompt-chunk", o.decode_prompt_chunk,
                  "Most prompt tokens of the decode sequences in one step: a batch's prompts are prefilled in steps "
                  "of at most this many (a longer prompt in pieces), which bounds the step's scratch memory")
      ->capture_default_str();
  cmd->add_option("--page-size", o.page_size, "KV cache page size")->capture_default_str();
  cmd->add_option("--cache-bits", o.cache_bits,
                  "KV cache widths K,V, each 2..8 (quantized: bit planes and a scale per 32 elements) or 16 (pages of "
                  "the backend's kv_dtype), or N for N,N, as exl3-launch --cache-bits; the decode rows' KV bytes are "
                  "counted at these widths")
      ->capture_default_str();
  o.int8_activations = "off";
  cmd->add_option("--int8-activations", o.int8_activations, int8_activations_flag_help())
      ->check(CLI::IsMember({"off", "auto", "on"}))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--step-graphs", [&o](const std::string& v) { o.step_graphs = v == "on"; },
         "on: decode steps replay one CUDA graph per batch size and page bucket (CUDA backend); off: launch every op")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str("on");
  cmd->add_option("--ranks", o.ranks,
                  "Ranks, as threads of this process: 1 runs the whole model on --device; more shard it with the "
                  "real planner (--mode, --split) over Gloo (cpu) or NCCL (cuda, one GPU per rank) and time rank 0, "
                  "the collectives keeping the ranks in step")
      ->capture_default_str();
  cmd->add_option("--devices", o.devices, "CUDA device of each rank, comma-separated (default 0 .. ranks-1)")
      ->delimiter(',');
  cmd->add_option("--split", o.split,
                  "Planner caps per rank in GiB, comma-separated, as exl3-launch --split (default: equal caps, an "
                  "even split)")
      ->delimiter(',');
  cmd->add_option("--mode", o.mode, "With several ranks: tp (tensor parallel) or layers (layer split)")
      ->capture_default_str();
  cmd->add_option("--all-reduce", o.all_reduce, all_reduce_flag_help())->capture_default_str();
  cmd->add_option("--all-reduce-oneshot-max-kib", o.all_reduce_oneshot_max_kib, all_reduce_oneshot_max_kib_flag_help())
      ->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write the results as JSON here");
  cmd->add_option("--markdown", o.markdown_path, "Write the results as markdown tables here");
  cmd->callback([&o]() {
    o.log = stderr;
    absl::StatusOr<ModelBenchResult> result = run_model_bench(o);
    if (!result.ok()) {
      std::fprintf(stderr, "exl3-bench model: error: %s\n", std::string(result.status().message()).c_str());
      throw CLI::RuntimeError(1);
    }
    std::fputs(model_bench_markdown(*result).c_str(), stdout);
  });
}

}  // namespace exl3
