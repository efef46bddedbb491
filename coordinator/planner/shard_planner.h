// The shard planner: given a ModelFootprint and a hard memory cap per rank, decides which rank
// holds which part of the model, before anything loads (architecture.md, "Sharding").
//
// Tensor parallel (PlanMode::kTensorParallel). Every rank runs every layer and holds the
// replicated parts (embedding, all norms) plus the workspace. What each cap leaves after those is
// the rank's "room"; the units of each component type (attention: KV-head groups, MLP: 128
// columns, lm_head: 128 vocab rows) are split in proportion to the rooms, once per type, rounded
// with largest remainder (ties to the lower rank), and laid out as contiguous ranges in rank order,
// the same in every layer. A rank may get zero units. If a rank's total still exceeds its cap
// (rounding, partial units, KV cache), units move one at a time from it to the rank with the most
// room that can take them: the smallest unit type that clears the overflow (else the largest),
// taken from the highest layer first, so per-layer ranges may then differ towards the last layers.
//
// Layer split (PlanMode::kLayers). Ranks hold contiguous layer ranges in rank order, whole layers
// with the KV cache of their own layers. The embedding travels with layer 0 and the lm_head (with
// the final norm) with the last layer, so the first rank that holds layers embeds (rank 0 unless
// its cap is too small for anything) and the last rank that holds layers computes the logits.
// Boundaries follow the caps' rooms (cap minus workspace) in proportion, then are clamped to what
// fits: a rank never exceeds its cap, and every boundary leaves the later ranks enough room for the
// rest. A rank may hold no layers (its cap is 0 or too small); it then holds nothing at all.
//
// KV cache. Pages are one pool the scheduler hands out, so every rank caches the same number of
// pages (each for its own KV heads / layers). By default plan_shards asks for max_batch full-length
// sequences; when the caps cannot hold that many pages but can hold one full-length sequence
// (ceil(max_seq_len / page_size) pages) besides the weights and fixed parts, it plans the largest
// page count that fits every rank (RankPlan::num_pages; requests then wait for pages). An explicit
// cache size (requested_cache_tokens, --cache-tokens) is planned exactly or refused.
//
// Caps are hard. When the model plus cache cannot fit, plan_shards returns RESOURCE_EXHAUSTED saying
// by how much and where: "rank 1 needs 3.20 GiB more than its 2.00 GiB cap ...", or "the model
// needs at least 41.30 GiB ..., the caps total 36.00 GiB: 5.30 GiB short; with the units split in
// proportion to the caps, rank 0 needs 2.10 GiB more than its 16.00 GiB cap, rank 1 ...". When
// the cache was fitted, the refusal is for the smallest cache: one full-length sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/model_footprint.h"

namespace exl3 {

enum class PlanMode { kTensorParallel, kLayers };

// "tp" / "layers": the spelling of --mode and of ShardPlan.mode in proto/worker.proto.
std::string plan_mode_name(PlanMode mode);
absl::StatusOr<PlanMode> parse_plan_mode(const std::string& name);

struct PlannerOptions {
  PlanMode mode = PlanMode::kTensorParallel;
  // One hard cap per rank, in bytes (--split GiB, see gib_to_bytes; RAM for CPU workers). The
  // number of caps is the world size.
  std::vector<uint64_t> caps;
  // Longest sequence (prompt + output), most sequences running at once, tokens per KV page.
  int64_t max_seq_len = 2048;
  int64_t max_batch = 1;
  int64_t page_size = 256;
  // Most tokens in one forward step (prefill chunk over the batch), for the workspace estimate; the
  // attention scratch assumes contexts up to max_seq_len.
  int64_t step_tokens = 256;
  // KV cache size in tokens (--cache-tokens): 0 = fit it (max_batch full-length sequences, or
  // fewer pages when the caps need it, see above); > 0 = exactly ceil(requested_cache_tokens /
  // page_size) pages, at least one full-length sequence, refused when the caps cannot hold them.
  int64_t requested_cache_tokens = 0;
  // Logits rows per sequence in a step: 1, or 1 + draft tokens with speculative decoding (each
  // decoding sequence scores its proposals too).
  int64_t logit_rows_per_seq = 1;
  // Speculative decoding's draft model (null = none): held whole by the lowest rank with the head
  // (rank 0 in tp mode, the last rank in a layer split), with a KV cache of the same pages at its
  // footprint's cache_bits and its own workspace; that rank plans the model within its cap less
  // those bytes, which its plan then counts as workspace.
  const ModelFootprint* draft = nullptr;
  // --all-reduce oneshot: the largest part that goes one-shot, in bytes; each CUDA rank of a world
  // of several then holds cuda_oneshot_all_reduce_bytes besides NCCL's buffers. 0 = NCCL alone.
  int64_t oneshot_all_reduce_max_bytes = 0;
  // Pages to price: plan_shards sets it on the options of each attempt; by hand, to price a given
  // cache (price_rank uses the plan's num_pages). 0 = wanted_pages().
  int64_t pages = 0;

  // Pages of one full-length sequence: ceil(max_seq_len / page_size).
  int64_t sequence_pages() const;
  // What is asked for: ceil(requested_cache_tokens / page_size), or max_batch * sequence_pages().
  int64_t wanted_pages() const;
  // The pages priced: `pages` when set, else wanted_pages().
  int64_t num_pages() const { return pages > 0 ? pages : wanted_pages(); }
  int64_t cache_tokens() const { return num_pages() * page_size; }
  // These options pricing exactly `n` pages.
  PlannerOptions with_pages(int64_t n) const;
  // The step limits a worker is loaded with for this plan: step_tokens tokens, max_batch
  // sequences and logits rows, num_pages pages per sequence (what the coordinator sends in
  // LoadShard, and what the CUDA pricing assumes).
  StepShape step_shape() const;
};

// One layer of one rank (mirrors proto LayerShard): KV heads [kv_head_begin, kv_head_end) (query
// heads follow, times heads per KV head) and intermediate columns [mlp_begin, mlp_end). Empty
// ranges are begin == end at the position where this rank's range would start.
struct LayerPlan {
  int64_t layer = 0;
  int64_t kv_head_begin = 0, kv_head_end = 0;
  int64_t mlp_begin = 0, mlp_end = 0;
};

// What one rank holds (mirrors proto ShardPlan; mode is plan_mode_name(mode) there).
struct RankPlan {
  PlanMode mode = PlanMode::kTensorParallel;
  int rank = 0;
  int world_size = 1;
  int64_t first_layer = 0, end_layer = 0;  // layers run, [first, end); tp: every layer
  std::vector<LayerPlan> layers;           // one per layer in [first_layer, end_layer)
  int64_t vocab_begin = 0, vocab_end = 0;  // lm_head rows held
  bool has_embedding = false;              // tp: always true (the embedding is replicated)
  bool has_head = false;                   // tp: always true (logits are all-gathered)
  // Bytes this rank is expected to allocate: weights (its slices plus replicated parts), KV cache,
  // workspace. The worker's cache is num_pages pages of page_size tokens for its own KV heads.
  uint64_t weight_bytes = 0;
  uint64_t cache_bytes = 0;
  uint64_t workspace_bytes = 0;
  int64_t num_pages = 0;
  int64_t page_size = 0;

  uint64_t total_bytes() const { return weight_bytes + cache_bytes + workspace_bytes; }
};

// Plans one RankPlan per cap, in rank order, every one with the same num_pages (options.pages when
// set, else the requested or fitted cache above). Errors: INVALID_ARGUMENT for bad options (no
// caps, non-positive sizes, a requested cache smaller than one full-length sequence),
// RESOURCE_EXHAUSTED when the caps cannot hold the model, cache and workspace.
absl::StatusOr<std::vector<RankPlan>> plan_shards(const ModelFootprint& footprint, const PlannerOptions& options);

// Speculative decoding's draft model as the planner prices it (options.draft): its weights, a KV
// cache of options' pages at the draft footprint's cache_bits and its workspace, held by
// draft_model_rank (the lowest rank with the head: 0 in tp mode, the last in a layer split) and
// counted in that rank's workspace bytes.
uint64_t draft_model_bytes(const ModelFootprint& draft, const PlannerOptions& options);
int draft_model_rank(const PlannerOptions& options);

// One line on the KV cache of a plan with `pages` pages (for start-up logs and the plan table):
//   "KV cache: 512 pages of 256 tokens per rank (131072 tokens: max-batch 16 x 8192)"
//   "KV cache: 40 pages of 256 tokens (10240 tokens) fit, fewer than max-batch 16 x 8192; requests
//    wait for pages"
//   "KV cache: 40 pages of 256 tokens per rank (10240 tokens, as requested: 10000)"
std::string kv_cache_summary(const PlannerOptions& options, int64_t pages);
// True when a fitted plan holds fewer pages than max_batch full-length sequences.
bool cache_was_fitted(const PlannerOptions& options, int64_t pages);

// Bytes every rank that holds anything reserves besides its weights and KV cache: kCpu the
// workspace estimate (WorkspaceFootprint), kCuda cuda_rank_reserve for the widest rank of the plan
// (widest_rank_shape), i.e. forward workspace, scratch, cuBLAS workspace, CUDA context and NCCL.
uint64_t rank_reserve_bytes(const ModelFootprint& footprint, const PlannerOptions& options);
// The same for kCuda, by part.
CudaRankReserve cuda_plan_reserve(const ModelFootprint& footprint, const PlannerOptions& options);

// Recomputes a rank's bytes from its ranges (what plan_shards stores in the plan); exposed so
// callers and tests can price a plan edited by hand.
struct RankBytes {
  uint64_t weights = 0;
  uint64_t cache = 0;
  uint64_t workspace = 0;
};
RankBytes price_rank(const ModelFootprint& footprint, const PlannerOptions& options, const RankPlan& plan);

}  // namespace exl3
