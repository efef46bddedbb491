// The ranks of exl3-bench model: one (the whole model on one device), or several threads of this
// process, each with its own backend, communicator (Gloo between CPU ranks; NCCL, optionally behind
// the one-shot all-reduce, between GPU ranks) and shard from the real planner (--mode, --split).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/model_bench.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"
#include "worker/engine.h"
#include "worker/model/config.h"
#include "worker/model/model_shard.h"

namespace exl3 {

// Checks the rank flags (--ranks, --devices, --split, --mode, --all-reduce): INVALID_ARGUMENT
// naming the flag.
absl::Status validate_bench_ranks(const ModelBenchOptions& o);

// CUDA device of rank `rank`: --devices[rank], else --device for one rank, else `rank`.
int bench_rank_device(const ModelBenchOptions& o, int rank);

// One shard per rank: the whole model for one rank; otherwise the planner's plans for o.mode with
// caps o.split (or equal caps, far above the model: an even split), pricing the KV cache (at
// engine.cache_bits) and step sizes of `engine` exactly and sequences of up to `longest_sequence`
// tokens. The planner's errors (a split that cannot hold the model) pass through, naming the split.
absl::StatusOr<std::vector<ModelShard>> plan_bench_shards(const ModelBenchOptions& o, const ModelConfig& config,
                                                          const EngineOptions& engine, int64_t longest_sequence);

// Rank `rank`'s backend: the CPU backend, or CUDA on bench_rank_device (make_bench_backend).
absl::StatusOr<std::shared_ptr<Backend>> make_rank_backend(const ModelBenchOptions& o, int rank);

// Rank `rank`'s communicator through `store` (null for one rank): Gloo on loopback between CPU
// ranks; NCCL on the backend's stream between GPU ranks (collectives only enqueued, flushed once a
// step, as GPU workers run them), wrapped in the one-shot all-reduce with --all-reduce oneshot.
absl::StatusOr<std::unique_ptr<Communicator>> make_bench_communicator(const ModelBenchOptions& o, int rank,
                                                                      Backend& backend, RendezvousStore& store);

}  // namespace exl3
