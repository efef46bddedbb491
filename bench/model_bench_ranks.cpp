// The ranks of exl3-bench model: flag checks, the planner's shards, and each rank's backend and
// communicator.
#include "bench/model_bench_ranks.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_backend.h"
#include "coordinator/planner/byte_units.h"
#include "coordinator/planner/model_footprint.h"
#include "coordinator/planner/rank_shard.h"
#include "coordinator/planner/shard_planner.h"
#include "worker/comm/all_reduce_mode.h"
#include "worker/loader/safetensors.h"

#ifdef EXL3_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/p2p_all_reduce_communicator.h"
#endif

namespace exl3 {
namespace {

constexpr int kMaxRanks = 64;
// Deadline of the ranks' rendezvous and of every collective: a rank that fails (say, to load)
// leaves the others waiting in a collective until then.
constexpr std::chrono::milliseconds kCollectiveTimeout{60000};
// Each rank's cap when --split is not given: equal and far above any model, so that the planner
// splits evenly.
constexpr double kUnboundedCapGib = 1 << 20;

}  // namespace

absl::Status validate_bench_ranks(const ModelBenchOptions& o) {
  if (o.ranks < 1 || o.ranks > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("--ranks: ", o.ranks, " (1..", kMaxRanks, ")"));
  }
  if (!o.devices.empty()) {
    if (o.backend != "cuda") return absl::InvalidArgumentError("--devices: only with --backend cuda");
    if (static_cast<int>(o.devices.size()) != o.ranks) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices: ", o.devices.size(), " devices for --ranks ", o.ranks, " (one per rank)"));
    }
    for (int d : o.devices) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("--devices: ", d, " is negative"));
    }
  }
  if (!o.split.empty()) {
    if (static_cast<int>(o.split.size()) != o.ranks) {
      return absl::InvalidArgumentError(
          absl::StrCat("--split: ", o.split.size(), " caps for --ranks ", o.ranks, " (one per rank, GiB)"));
    }
    for (double g : o.split) {
      if (!(g > 0.0)) return absl::InvalidArgumentError(absl::StrCat("--split: cap ", g, " GiB must be positive"));
    }
  }
  if (!parse_plan_mode(o.mode).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--mode: '", o.mode, "' (tp or layers)"));
  }
  EXL3_ASSIGN_OR_RETURN(const AllReduceMode all_reduce, parse_all_reduce_mode(o.all_reduce, "--all-reduce"));
  EXL3_RETURN_IF_ERROR(
      validate_all_reduce_oneshot_max_kib(o.all_reduce_oneshot_max_kib, "--all-reduce-oneshot-max-kib"));
  if (all_reduce == AllReduceMode::kOneshot && o.backend != "cuda") {
    return absl::InvalidArgumentError("--all-reduce oneshot needs --backend cuda (CPU ranks all-reduce through Gloo)");
  }
  return absl::OkStatus();
}

int bench_rank_device(const ModelBenchOptions& o, int rank) {
  if (!o.devices.empty()) return o.devices.at(static_cast<size_t>(rank));
  return o.ranks == 1 ? o.device : rank;
}

absl::StatusOr<std::vector<ModelShard>> plan_bench_shards(const ModelBenchOptions& o, const ModelConfig& config,
                                                          const EngineOptions& engine, int64_t longest_sequence) {
  if (o.ranks == 1) return std::vector<ModelShard>{ModelShard::full(config)};
  const BackendKind kind = o.backend == "cuda" ? BackendKind::kCuda : BackendKind::kCpu;
  EXL3_ASSIGN_OR_RETURN(SafetensorsCollection tensors, SafetensorsCollection::open_dir(o.model_dir));
  EXL3_ASSIGN_OR_RETURN(ModelFootprint footprint, build_model_footprint(config, kind, &tensors));
  EXL3_RETURN_IF_ERROR(footprint.set_cache_bits(engine.cache_bits));
  PlannerOptions p;
  EXL3_ASSIGN_OR_RETURN(p.mode, parse_plan_mode(o.mode));
  for (int r = 0; r < o.ranks; ++r) {
    p.caps.push_back(gib_to_bytes(o.split.empty() ? kUnboundedCapGib : o.split[static_cast<size_t>(r)]));
  }
  p.page_size = engine.page_size;
  p.max_batch = engine.max_seqs;
  p.max_seq_len = longest_sequence;
  p.step_tokens = engine.max_step_tokens;
  p.requested_cache_tokens = engine.num_pages * engine.page_size;
  if (o.all_reduce == "oneshot") p.oneshot_all_reduce_max_bytes = int64_t{o.all_reduce_oneshot_max_kib} << 10;
  absl::StatusOr<std::vector<RankPlan>> plans = plan_shards(footprint, p);
  if (!plans.ok()) {
    return absl::Status(plans.status().code(),
                        absl::StrCat("planning ", o.ranks, " ranks (--mode ", o.mode, ", --split ",
                                     o.split.empty() ? std::string("even") : absl::StrJoin(o.split, ","),
                                     "): ", plans.status().message()));
  }
  std::vector<ModelShard> shards;
  for (const RankPlan& plan : *plans) shards.push_back(model_shard_of(plan));
  return shards;
}

absl::StatusOr<std::shared_ptr<Backend>> make_rank_backend(const ModelBenchOptions& o, int rank) {
  return make_bench_backend(o.backend, bench_rank_device(o, rank), o.int8_activations,
                            o.ranks > 1 ? absl::StrCat("rank ", rank) : "");
}

absl::StatusOr<std::unique_ptr<Communicator>> make_bench_communicator(const ModelBenchOptions& o, int rank,
                                                                      Backend& backend, RendezvousStore& store) {
  if (o.ranks == 1) return std::unique_ptr<Communicator>();
  const std::string prefix = "exl3-bench-model";
  if (o.backend == "cpu") {
    GlooOptions g;
    g.rank = rank;
    g.world_size = o.ranks;
    g.prefix = prefix;
    g.timeout = kCollectiveTimeout;
    return make_gloo_communicator(g, store);
  }
#ifdef EXL3_HAVE_CUDA
  NcclOptions n;
  n.rank = rank;
  n.world_size = o.ranks;
  n.device = bench_rank_device(o, rank);
  n.stream = cuda_stream_of(backend);
  n.prefix = prefix;
  n.timeout = kCollectiveTimeout;
  n.init_timeout = kCollectiveTimeout;
  n.wait_each_op = false;
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl, make_nccl_communicator(n, store));
  if (o.all_reduce != "oneshot") return nccl;
  return make_p2p_all_reduce_communicator(p2p_all_reduce_options_of(n, int64_t{o.all_reduce_oneshot_max_kib} << 10),
                                          std::move(nccl), store);
#else
  (void)backend;
  return absl::UnimplementedError("--backend cuda: this exl3-bench was built without CUDA (configure with EXL3_CUDA=ON)");
#endif
}

}  // namespace exl3
