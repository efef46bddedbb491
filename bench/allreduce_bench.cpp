// exl3-bench allreduce (see allreduce_bench.h): a size sweep of all-reduce sums between N rank
// threads of one process, on NCCL (rank r on GPU r, its own stream, device tensors) or Gloo (host
// F32 on loopback TCP). Each size is checked once for exact sums, then timed per all-reduce.
#include "bench/allreduce_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_report.h"
#include "kernels/check.h"
#include "kernels/fp16.h"
#include "kernels/tensor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/in_memory_store.h"

#ifdef EXL3_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.cuh"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/p2p_all_reduce_communicator.h"
#endif

namespace exl3 {
namespace {

constexpr int kMaxRanks = 64;
constexpr int64_t kMaxBytes = int64_t{1} << 36;
constexpr std::chrono::milliseconds kOpTimeout{120000};
constexpr const char* kBusbwFormula = "busbw = algbw * 2 * (n - 1) / n";
// Times are host times until the communicator has seen the op complete (wait_each_op polling).
constexpr const char* kNcclTimingNote =
    "host time until the NCCL communicator sees completion: it yields for 100 us, then polls with sleeps "
    "doubling from 20 us to 1 ms, so a time above 100 us may be over by up to its last sleep";
constexpr const char* kGraphTimingNote =
    "device time: each rank captures its timed all-reduces in one CUDA graph and times each launch with CUDA "
    "events after a barrier; per all-reduce = launch time / all-reduces in the graph, the slowest rank's";

absl::StatusOr<DType> parse_dtype(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "f16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("--dtype ", name, ": expected f32, f16 or bf16"));
}

// ---- inputs and the check of their sums ---------------------------------------------------------

// Largest integer magnitude below which every integer is exact in `dtype`.
int64_t exact_limit(DType dtype) {
  switch (dtype) {
    case DType::kF16: return 2048;
    case DType::kBF16: return 256;
    default: return int64_t{1} << 24;
  }
}

// Element i of rank r's input: an integer in [-m/2, m/2) with m = limit / ranks, so every partial
// sum stays exact whatever order the backend adds in; differs between ranks and along i.
int64_t input_value(DType dtype, int ranks, int rank, int64_t i) {
  const int64_t m = std::max<int64_t>(exact_limit(dtype) / ranks, 2);
  return (i * 7919 + rank * 104729 + 13) % m - m / 2;
}

std::vector<uint8_t> encode_input(DType dtype, int ranks, int rank, int64_t n) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(input_value(dtype, ranks, rank, i));
    if (dtype == DType::kF32) {
      std::memcpy(&bytes[static_cast<size_t>(i) * 4], &v, 4);
    } else {
      const uint16_t h = dtype == DType::kF16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
      std::memcpy(&bytes[static_cast<size_t>(i) * 2], &h, 2);
    }
  }
  return bytes;
}

double decode_element(DType dtype, const std::vector<uint8_t>& bytes, int64_t i) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, &bytes[static_cast<size_t>(i) * 4], 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[static_cast<size_t>(i) * 2], 2);
  return dtype == DType::kF16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
}

// Every element of `got` must be the exact sum of the ranks' inputs; INTERNAL naming the first
// mismatches, their count and the max error otherwise.
absl::Status check_sums(DType dtype, int ranks, int rank, const std::vector<uint8_t>& got, int64_t n) {
  int64_t mismatches = 0;
  double max_error = 0.0;
  std::string first;
  for (int64_t i = 0; i < n; ++i) {
    int64_t want = 0;
    for (int r = 0; r < ranks; ++r) want += input_value(dtype, ranks, r, i);
    const double value = decode_element(dtype, got, i);
    const double error = std::abs(value - static_cast<double>(want));
    if (!(error == 0.0)) {
      max_error = std::isnan(error) ? error : std::max(max_error, error);
      if (++mismatches <= 5) absl::StrAppend(&first, " [", i, "] got ", value, " want ", want, ";");
    }
  }
  if (mismatches == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("rank ", rank, ": all-reduce of ", n, " ", dtype_name(dtype),
                                          " elements: ", mismatches, " sums wrong (must be exact), max error ",
                                          max_error, "; first:", first));
}

// ---- one rank -------------------------------------------------------------------------------------

struct Plan {
  bool nccl = false;     // a device backend: nccl, or oneshot over nccl
  bool oneshot = false;
  bool graph = false;    // graph timing
  int64_t oneshot_max_bytes = 0;
  int oneshot_blocks = 0;
  int ranks = 1;
  DType dtype = DType::kF32;
  std::vector<int64_t> sizes;  // bytes
  int iters = 1;
  int warmup = 0;
};

// Where a rank's buffers live: host memory (Gloo), or its GPU with the stream its ops run on.
struct RankPlace {
  int rank = 0;
  void* stream = nullptr;  // cudaStream_t under NCCL
};

Tensor make_buffer(const Plan& plan, int64_t n) {
#ifdef EXL3_HAVE_CUDA
  if (plan.nccl) {
    void* ptr = nullptr;
    EXL3_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(1, static_cast<size_t>(n) * dtype_size(plan.dtype))));
    std::shared_ptr<const void> owner(ptr, [](const void* p) { cudaFree(const_cast<void*>(p)); });
    return Tensor::wrap(Device::kCuda, plan.dtype, {n}, ptr, std::move(owner));
  }
#endif
  return Tensor::zeros(plan.dtype, {n});
}

void upload(const Plan& plan, const RankPlace& place, Tensor& t, const std::vector<uint8_t>& bytes) {
#ifdef EXL3_HAVE_CUDA
  if (plan.nccl) {
    const auto stream = static_cast<cudaStream_t>(place.stream);
    EXL3_CUDA_CHECK(cudaMemcpyAsync(t.mutable_raw(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
    EXL3_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
#endif
  (void)plan;
  (void)place;
  std::memcpy(t.mutable_raw(), bytes.data(), bytes.size());
}

std::vector<uint8_t> download(const Plan& plan, const RankPlace& place, const Tensor& t) {
  std::vector<uint8_t> bytes(t.nbytes());
#ifdef EXL3_HAVE_CUDA
  if (plan.nccl) {
    const auto stream = static_cast<cudaStream_t>(place.stream);
    EXL3_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), t.raw(), bytes.size(), cudaMemcpyDeviceToHost, stream));
    EXL3_CUDA_CHECK(cudaStreamSynchronize(stream));
    return bytes;
  }
#endif
  (void)plan;
  (void)place;
  std::memcpy(bytes.data(), t.raw(), bytes.size());
  return bytes;
}

// Zeros, so that the timed sums stay zero (repeated sums of the check's inputs would overflow).
void clear(const Plan& plan, const RankPlace& place, Tensor& t) {
#ifdef EXL3_HAVE_CUDA
  if (plan.nccl) {
    const auto stream = static_cast<cudaStream_t>(place.stream);
    EXL3_CUDA_CHECK(cudaMemsetAsync(t.mutable_raw(), 0, t.nbytes(), stream));
    EXL3_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
#endif
  (void)plan;
  (void)place;
  std::memset(t.mutable_raw(), 0, t.nbytes());
}

#ifdef EXL3_HAVE_CUDA
// Graph timing of one size: plan.iters all-reduces of `t` captured in one graph on the rank's
// stream (the communicator only enqueues), launched once untimed, then kGraphLaunches times, each
// after a barrier and timed by events; seconds gets each launch's time per all-reduce.
absl::Status time_in_graph(Communicator& comm, const Plan& plan, const RankPlace& place, Tensor& t,
                           std::vector<double>& seconds) {
  const auto stream = static_cast<cudaStream_t>(place.stream);
  cudaGraph_t graph = nullptr;
  EXL3_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  absl::Status captured = absl::OkStatus();
  for (int i = 0; i < plan.iters && captured.ok(); ++i) captured = comm.all_reduce_sum(t);
  EXL3_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> graph_owner(graph, cudaGraphDestroy);
  EXL3_RETURN_IF_ERROR(captured);
  cudaGraphExec_t exec = nullptr;
  EXL3_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> exec_owner(exec, cudaGraphExecDestroy);
  cudaEvent_t start = nullptr, end = nullptr;
  EXL3_CUDA_CHECK(cudaEventCreate(&start));
  EXL3_CUDA_CHECK(cudaEventCreate(&end));
  absl::Status status = absl::OkStatus();
  for (int launch = -1; launch < kGraphLaunches && status.ok(); ++launch) {
    status = comm.barrier();
    if (status.ok()) status = comm.flush();
    if (!status.ok()) break;
    EXL3_CUDA_CHECK(cudaEventRecord(start, stream));
    EXL3_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    EXL3_CUDA_CHECK(cudaEventRecord(end, stream));
    status = comm.flush();
    if (!status.ok() || launch < 0) continue;  // launch -1 warms up
    float ms = 0.0f;
    EXL3_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
    seconds.push_back(static_cast<double>(ms) / 1e3 / plan.iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return status;
}
#else
absl::Status time_in_graph(Communicator&, const Plan&, const RankPlace&, Tensor&, std::vector<double>&) {
  return absl::UnimplementedError("--timing graph: this build has no CUDA");
}
#endif

// The sweep on one rank: seconds[s][i] is this rank's time of timed all-reduce i of size s. A
// wrong sum does not stop the sweep (the other ranks would wait out their timeouts): it is
// returned at the end.
absl::Status run_rank(Communicator& comm, const Plan& plan, const RankPlace& place,
                      std::vector<std::vector<double>>& seconds) {
  absl::Status check = absl::OkStatus();
  seconds.assign(plan.sizes.size(), {});
  for (size_t s = 0; s < plan.sizes.size(); ++s) {
    const int64_t n = plan.sizes[s] / static_cast<int64_t>(dtype_size(plan.dtype));
    Tensor t = make_buffer(plan, n);
    upload(plan, place, t, encode_input(plan.dtype, plan.ranks, place.rank, n));
    EXL3_RETURN_IF_ERROR(comm.all_reduce_sum(t));
    if (check.ok()) check = check_sums(plan.dtype, plan.ranks, place.rank, download(plan, place, t), n);
    clear(plan, place, t);
    if (plan.graph) {
      EXL3_RETURN_IF_ERROR(time_in_graph(comm, plan, place, t, seconds[s]));
      continue;
    }
    for (int i = 0; i < plan.warmup; ++i) EXL3_RETURN_IF_ERROR(comm.all_reduce_sum(t));
    seconds[s].resize(static_cast<size_t>(plan.iters));
    for (int i = 0; i < plan.iters; ++i) {
      EXL3_RETURN_IF_ERROR(comm.barrier());
      const auto start = std::chrono::steady_clock::now();
      EXL3_RETURN_IF_ERROR(comm.all_reduce_sum(t));
      seconds[s][static_cast<size_t>(i)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  return check;
}

absl::Status gloo_rank(const Plan& plan, int rank, RendezvousStore& store,
                       std::vector<std::vector<double>>& seconds) {
  GlooOptions o;
  o.rank = rank;
  o.world_size = plan.ranks;
  o.prefix = "allreduce_bench";
  o.timeout = kOpTimeout;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = make_gloo_communicator(o, store);
  if (!comm.ok()) return comm.status();
  return run_rank(**comm, plan, RankPlace{rank, nullptr}, seconds);
}

#ifdef EXL3_HAVE_CUDA
absl::Status nccl_rank(const Plan& plan, int rank, RendezvousStore& store,
                       std::vector<std::vector<double>>& seconds) {
  EXL3_CUDA_CHECK(cudaSetDevice(rank));
  cudaStream_t stream = nullptr;
  EXL3_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  absl::Status status;
  {
    NcclOptions o;
    o.rank = rank;
    o.world_size = plan.ranks;
    o.device = rank;
    o.stream = stream;
    o.prefix = "allreduce_bench";
    o.timeout = kOpTimeout;
    o.wait_each_op = !plan.graph;  // graph timing captures the calls: they must only enqueue
    absl::StatusOr<std::unique_ptr<Communicator>> comm = make_nccl_communicator(o, store);
    if (comm.ok() && plan.oneshot) {
      P2pAllReduceOptions po = p2p_all_reduce_options_of(o, plan.oneshot_max_bytes);
      po.max_blocks = plan.oneshot_blocks;
      comm = make_p2p_all_reduce_communicator(po, *std::move(comm), store);
    }
    status = comm.ok() ? run_rank(**comm, plan, RankPlace{rank, stream}, seconds) : comm.status();
  }
  EXL3_CUDA_CHECK(cudaStreamDestroy(stream));
  return status;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::StrCat("CUDA device ", device, " (properties unavailable)");
  }
  return prop.name;
}
#endif

absl::StatusOr<Plan> make_plan(const AllreduceBenchOptions& o) {
  Plan plan;
  if (o.backend != "gloo" && o.backend != "nccl" && o.backend != "oneshot") {
    return absl::InvalidArgumentError(absl::StrCat("--backend ", o.backend, ": expected gloo, nccl or oneshot"));
  }
  plan.oneshot = o.backend == "oneshot";
  plan.nccl = o.backend == "nccl" || plan.oneshot;
  if (o.timing != "host" && o.timing != "graph") {
    return absl::InvalidArgumentError(absl::StrCat("--timing ", o.timing, ": expected host or graph"));
  }
  plan.graph = o.timing == "graph";
  if (plan.graph && !plan.nccl) {
    return absl::InvalidArgumentError("--timing graph: needs a device backend (--backend nccl or oneshot)");
  }
  if (plan.oneshot) {
    absl::StatusOr<std::vector<int64_t>> max = parse_allreduce_sizes(o.oneshot_max);
    if (!max.ok() || max->size() != 1 || (*max)[0] > (int64_t{64} << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("--oneshot-max ", o.oneshot_max,
                                                     ": expected one size up to 64M (bytes like 64K or 256K)"));
    }
    plan.oneshot_max_bytes = (*max)[0];
  }
  if (o.oneshot_blocks < 0 || o.oneshot_blocks > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--oneshot-blocks ", o.oneshot_blocks, ": expected 0 (the SM count) to 65535"));
  }
  plan.oneshot_blocks = o.oneshot_blocks;
  if (o.ranks < 1 || o.ranks > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("--ranks ", o.ranks, ": expected 1..", kMaxRanks));
  }
  plan.ranks = o.ranks;
  absl::StatusOr<DType> dtype = parse_dtype(o.dtype);
  if (!dtype.ok()) return dtype.status();
  plan.dtype = *dtype;
  if (!plan.nccl && plan.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype ", o.dtype,
                                                   ": the gloo backend all-reduces host f32 only; use --backend "
                                                   "nccl or oneshot for f16 and bf16"));
  }
  if (plan.oneshot && plan.ranks > 8) {
    return absl::InvalidArgumentError(absl::StrCat("--backend oneshot with --ranks ", plan.ranks, ": at most 8"));
  }
  if (o.iters < 1) return absl::InvalidArgumentError(absl::StrCat("--iters ", o.iters, ": expected at least 1"));
  if (o.warmup < 0) return absl::InvalidArgumentError(absl::StrCat("--warmup ", o.warmup, ": expected 0 or more"));
  plan.iters = o.iters;
  plan.warmup = o.warmup;
  absl::StatusOr<std::vector<int64_t>> sizes = parse_allreduce_sizes(o.sizes);
  if (!sizes.ok()) return sizes.status();
  for (int64_t bytes : *sizes) {
    if (bytes % static_cast<int64_t>(dtype_size(plan.dtype)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: ", bytes, " bytes is not a whole number of ", o.dtype,
                                                     " elements (", dtype_size(plan.dtype), " bytes each)"));
    }
  }
  plan.sizes = *std::move(sizes);
  if (plan.nccl) {
#ifdef EXL3_HAVE_CUDA
    const int devices = allreduce_bench_cuda_devices();
    if (devices < plan.ranks) {
      return absl::FailedPreconditionError(absl::StrCat("--backend ", o.backend, " with --ranks ", plan.ranks, " needs ",
                                                        plan.ranks, " CUDA devices (rank r on GPU r); this machine has ",
                                                        devices));
    }
#else
    return absl::UnimplementedError(
        absl::StrCat("--backend ", o.backend, ": this build has no CUDA (configure with -DEXL3_CUDA=ON)"));
#endif
  }
  return plan;
}

}  // namespace

double allreduce_bus_factor(int ranks) { return 2.0 * (ranks - 1) / ranks; }

absl::StatusOr<std::vector<int64_t>> parse_allreduce_sizes(const std::string& text) {
  std::vector<int64_t> sizes;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    const std::string item(absl::StripAsciiWhitespace(entry));
    const auto bad = [&item](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes: \"", item, "\" ", why, " (expected bytes like 4096, 1K, 16M or 1G)"));
    };
    if (item.empty()) return bad("is empty");
    int64_t scale = 1;
    std::string digits = item;
    switch (absl::ascii_toupper(static_cast<unsigned char>(item.back()))) {
      case 'K': scale = int64_t{1} << 10; break;
      case 'M': scale = int64_t{1} << 20; break;
      case 'G': scale = int64_t{1} << 30; break;
      default: break;
    }
    if (scale != 1) digits.pop_back();
    const bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
      return absl::ascii_isdigit(static_cast<unsigned char>(c));
    });
    int64_t count = 0;
    if (!all_digits || !absl::SimpleAtoi(digits, &count)) return bad("is not a number with an optional K, M or G");
    if (count == 0) return bad("is zero");
    if (count > kMaxBytes / scale) return bad(absl::StrCat("is over ", kMaxBytes, " bytes"));
    sizes.push_back(count * scale);
  }
  return sizes;
}

int allreduce_bench_cuda_devices() {
#ifdef EXL3_HAVE_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return devices;
#else
  return 0;
#endif
}

absl::StatusOr<AllreduceBenchReport> run_allreduce_bench(const AllreduceBenchOptions& options) {
  absl::StatusOr<Plan> planned = make_plan(options);
  if (!planned.ok()) return planned.status();
  const Plan& plan = *planned;
  AllreduceBenchReport report;
  report.environment = capture_environment(plan.nccl ? "cuda" : "cpu", 0, options.argv);
  if (plan.nccl) {
    // NVLink multicast stays off on the shared machines (docs/hardware.md) unless asked for.
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    report.environment["nccl_nvls_enable"] = std::getenv("NCCL_NVLS_ENABLE");
  }
  for (int r = 0; r < plan.ranks; ++r) {
#ifdef EXL3_HAVE_CUDA
    report.devices.push_back(plan.nccl ? cuda_device_name(r) : report.environment.value("host_cpu", "cpu"));
#else
    report.devices.push_back(report.environment.value("host_cpu", "cpu"));
#endif
  }

  InMemoryStore store;
  std::vector<std::vector<std::vector<double>>> seconds(static_cast<size_t>(plan.ranks));
  std::vector<absl::Status> statuses(static_cast<size_t>(plan.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < plan.ranks; ++r) {
    threads.emplace_back([&, r] {
      const size_t i = static_cast<size_t>(r);
#ifdef EXL3_HAVE_CUDA
      statuses[i] = plan.nccl ? nccl_rank(plan, r, store, seconds[i]) : gloo_rank(plan, r, store, seconds[i]);
#else
      statuses[i] = gloo_rank(plan, r, store, seconds[i]);
#endif
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < plan.ranks; ++r) {
    const absl::Status& st = statuses[static_cast<size_t>(r)];
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("rank ", r, " (", options.backend, "): ", st.message()));
  }

  for (size_t s = 0; s < plan.sizes.size(); ++s) {
    AllreduceRow row;
    row.bytes = plan.sizes[s];
    row.elements = row.bytes / static_cast<int64_t>(dtype_size(plan.dtype));
    row.path = !plan.nccl ? "gloo" : plan.oneshot && row.bytes <= plan.oneshot_max_bytes ? "oneshot" : "nccl";
    double sum = 0.0;
    double min = 0.0;
    const size_t samples = seconds[0][s].size();  // iters, or graph launches: the same on every rank
    for (size_t i = 0; i < samples; ++i) {
      double slowest = 0.0;
      for (int r = 0; r < plan.ranks; ++r) slowest = std::max(slowest, seconds[static_cast<size_t>(r)][s][i]);
      sum += slowest;
      min = i == 0 ? slowest : std::min(min, slowest);
    }
    const double mean = samples > 0 ? sum / static_cast<double>(samples) : 0.0;
    row.mean_us = mean * 1e6;
    row.min_us = min * 1e6;
    row.algbw_gbs = mean > 0.0 ? static_cast<double>(row.bytes) / mean / 1e9 : 0.0;
    row.busbw_gbs = row.algbw_gbs * allreduce_bus_factor(plan.ranks);
    report.rows.push_back(row);
  }
  return report;
}

nlohmann::json allreduce_bench_json(const AllreduceBenchOptions& o, const AllreduceBenchReport& report) {
  nlohmann::json rows = nlohmann::json::array();
  for (const AllreduceRow& r : report.rows) {
    rows.push_back({{"bytes", r.bytes},
                    {"elements", r.elements},
                    {"path", r.path},
                    {"time_us_mean", r.mean_us},
                    {"time_us_min", r.min_us},
                    {"algbw_gbs", r.algbw_gbs},
                    {"busbw_gbs", r.busbw_gbs}});
  }
  return {{"mode", "allreduce"},
          {"environment", report.environment},
          {"backend", o.backend},
          {"ranks", o.ranks},
          {"dtype", o.dtype},
          {"devices", report.devices},
          {"iters", o.iters},
          {"warmup", o.warmup},
          {"timing", o.timing},
          {"oneshot_max", o.backend == "oneshot" ? o.oneshot_max : ""},
          {"oneshot_blocks", o.oneshot_blocks},
          {"time", o.timing == "graph" ? "per all-reduce, the slowest rank's; mean and min over graph launches"
                                       : "per all-reduce, the slowest rank's, after a barrier; mean and min over iters"},
          {"algbw_formula", "algbw = bytes / time_us_mean (GB/s = 1e9 bytes/s)"},
          {"busbw_formula", kBusbwFormula},
          {"busbw_factor", allreduce_bus_factor(o.ranks)},
          {"timing_note", o.timing == "graph" ? kGraphTimingNote : o.backend != "gloo" ? kNcclTimingNote : ""},
          {"rows", rows}};
}

std::string allreduce_bench_markdown(const AllreduceBenchOptions& o, const AllreduceBenchReport& report) {
  std::string md = absl::StrFormat("## all-reduce (sum): %s, %d ranks, %s\n\n", o.backend, o.ranks, o.dtype);
  for (size_t r = 0; r < report.devices.size(); ++r) {
    absl::StrAppend(&md, "- rank ", r, ": ", report.devices[r], "\n");
  }
  absl::StrAppendFormat(&md,
                        "\nTime per all-reduce (the slowest rank's), %d timed after %d warm-up; algbw = bytes / mean "
                        "time; %s (nccl-tests PERFORMANCE.md; here %.4f); GB/s = 1e9 bytes/s.\n\n",
                        o.iters, o.warmup, kBusbwFormula, allreduce_bus_factor(o.ranks));
  if (o.timing == "graph") {
    absl::StrAppend(&md, "Timing: ", kGraphTimingNote, " (", kGraphLaunches, " launches).\n\n");
  } else if (o.backend != "gloo") {
    absl::StrAppend(&md, "Timing: ", kNcclTimingNote, ".\n\n");
  }
  md += "| bytes | elements | path | mean (us) | min (us) | algbw (GB/s) | busbw (GB/s) |\n";
  md += "|------:|---------:|:-----|----------:|---------:|-------------:|-------------:|\n";
  for (const AllreduceRow& r : report.rows) {
    absl::StrAppendFormat(&md, "| %d | %d | %s | %.2f | %.2f | %.3f | %.3f |\n", r.bytes, r.elements, r.path,
                          r.mean_us, r.min_us, r.algbw_gbs, r.busbw_gbs);
  }
  return md;
}

absl::Status run_allreduce_bench_command(const AllreduceBenchOptions& o, std::FILE* log) {
  absl::StatusOr<AllreduceBenchReport> report = run_allreduce_bench(o);
  if (!report.ok()) return report.status();
  const std::string md = allreduce_bench_markdown(o, *report);
  if (log != nullptr) std::fputs(md.c_str(), log);
  if (!o.json_path.empty()) {
    EXL3_RETURN_IF_ERROR(write_report_file(o.json_path, allreduce_bench_json(o, *report).dump(2) + "\n"));
  }
  if (!o.markdown_path.empty()) return write_report_file(o.markdown_path, md);
  return absl::OkStatus();
}

void add_allreduce_subcommand(CLI::App& app, AllreduceBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "allreduce",
      "All-reduce (sum) latency and bandwidth over a sweep of sizes between N rank threads: NCCL (rank r on GPU r) "
      "or Gloo (host f32, loopback TCP), or the one-shot P2P kernel (parts up to --oneshot-max, the rest NCCL). Sums "
      "checked exact once per size; algbw and busbw as nccl-tests defines them.");
  cmd->add_option("--backend", o.backend,
                  "gloo, nccl or oneshot (the one-shot peer-to-peer kernel over NCCL, as --all-reduce oneshot runs)")
      ->capture_default_str();
  cmd->add_option("--timing", o.timing,
                  "host (each all-reduce timed on the host) or graph (nccl/oneshot: --iters all-reduces in one CUDA "
                  "graph per rank, timed with CUDA events over 5 launches, as decode steps run them)")
      ->capture_default_str();
  cmd->add_option("--oneshot-max", o.oneshot_max, "oneshot: the largest part in bytes that goes one-shot (K, M)")
      ->capture_default_str();
  cmd->add_option("--oneshot-blocks", o.oneshot_blocks,
                  "oneshot: most blocks of 256 threads per all-reduce kernel (0 = the GPU's SM count)")
      ->capture_default_str();
  cmd->add_option("--ranks", o.ranks, "Ranks (threads; NCCL: GPUs 0..N-1), 1..64")->capture_default_str();
  cmd->add_option("--sizes", o.sizes, "Message sizes in bytes, comma-separated; K, M, G = 2^10, 2^20, 2^30")
      ->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "f32, f16 or bf16 (gloo: f32 only)")->capture_default_str();
  cmd->add_option("--iters", o.iters, "Timed all-reduces per size")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed all-reduces per size before them")->capture_default_str();
  cmd->add_option("--json", o.json_path, "Write the results as JSON here");
  cmd->add_option("--markdown", o.markdown_path, "Write the markdown table here");
  cmd->callback([&o]() {
    if (absl::Status st = run_allreduce_bench_command(o, stdout); !st.ok()) {
      std::fprintf(stderr, "exl3-bench allreduce: error: %s\n", st.ToString().c_str());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace exl3
