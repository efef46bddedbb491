// Engine: one rank's executor. Holds the model shard, the KV cache and each live sequence's
// token history; runs step commands (a batch of prefill chunks and decodes, optionally several
// decode iterations) and samples with the counter-based sampler, identically on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/sampling.h"
#include "worker/comm/communicator.h"
#include "worker/draft_model.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace exl3 {

struct StepSequence {
  uint64_t seq_id = 0;
  std::vector<int32_t> tokens;      // run at start_pos, start_pos + 1, ...
  int32_t start_pos = 0;
  std::vector<int32_t> page_table;  // covers start_pos + tokens.size() + decode_steps - 1 positions
  bool sample = false;
  SamplingParams sampling;
  int32_t prompt_len = 0;           // prompt tokens of the sequence (for the penalties)
  bool return_logits = false;       // report the logits of every token of this step
  // Ids of positions [0, start_pos) reused from the prefix cache, on a sequence's first chunk when
  // start_pos > 0; they start its history (penalties). Empty otherwise.
  std::vector<int32_t> history_prefix = {};
  // Banned strings: ids banned at this step's first sampled position only (merged into
  // sampling.banned_ids for that draw), strictly increasing. Empty otherwise.
  std::vector<int32_t> banned_now = {};
  // Pipelined steps: the token to run is the last one this rank sampled for the sequence, which
  // its history ends with at start_pos (Engine::take_last_samples fills `tokens` with it).
  bool from_last_sample = false;
};

struct StepInput {
  std::vector<StepSequence> sequences;
  int32_t decode_steps = 1;
  // (src, dst) KV pages copied in order before the forward (prefix reuse's copy-on-write).
  std::vector<std::pair<int32_t, int32_t>> page_copies = {};
  // Speculative decoding (an engine with a draft group, decode_steps >= 2): every decoding sequence
  // (one token at the end of its history, sampled) runs one draft-and-verify round instead of
  // decode_steps plain iterations: the draft proposes decode_steps - 1 tokens, the target scores
  // them in one forward and keeps a prefix by rejection sampling (kernels/speculative.h), then one
  // more token; 1..decode_steps tokens come back. Other sequences run as in a plain step.
  bool speculative = false;
};

struct StepOutput {
  // Sampled tokens of each sampling sequence, in input order.
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> tokens;
  // Per entry of `tokens`, each token's logprobs when its sequence asked (Sampling.logprobs > 0)
  // and this rank computes the head; empty otherwise.
  std::vector<std::vector<TokenLogprobs>> logprobs;
  // Logits F32 [tokens, vocab] of sequences with return_logits (head ranks only).
  std::vector<std::pair<uint64_t, Tensor>> logits;
};

struct EngineOptions {
  int64_t num_pages = 0;
  int64_t page_size = 256;
  int64_t max_step_tokens = 2048;  // most tokens in one forward
  int64_t max_seqs = 256;          // most sequences in one step
  int64_t max_logit_rows = 256;    // most logits rows in one forward (sampled + returned)
  // Decode steps replay one step graph per batch size and page bucket where the backend and the
  // communicator allow it (StepLimits::step_graphs; the CPU backend never does).
  bool step_graphs = true;
  // KV cache widths (KvCacheBits: 16 = full precision, 2..8 = quantized as exl3-format.md §9).
  KvCacheBits cache_bits{};
  // Speculative decoding: the rank that drafts and verifies (the lowest rank with the head), -1 =
  // none. Every rank of the group gets the same value; only that rank is given the DraftModel.
  int draft_rank = -1;
};

// Most tokens a draft proposes in one round.
inline constexpr int32_t kMaxDraftTokens = 16;

// A step entry for `seq_id` running `tokens` from `start_pos` over `page_table`; with `sample` it
// draws one token greedily (temperature 0, no penalties): what benches and tests mostly run.
inline StepSequence greedy_step_sequence(uint64_t seq_id, std::vector<int32_t> tokens, int32_t start_pos,
                                         std::vector<int32_t> page_table, bool sample, int32_t prompt_len) {
  StepSequence s;
  s.seq_id = seq_id;
  s.tokens = std::move(tokens);
  s.start_pos = start_pos;
  s.page_table = std::move(page_table);
  s.sample = sample;
  s.sampling.temperature = 0.0f;
  s.prompt_len = prompt_len;
  return s;
}

// Whether a sequence of a speculative step drafts: one token to run and a token to sample (a draw
// with banned_now, after a banned string's rewind, is a plain one).
inline bool speculates(const StepSequence& s) {
  return s.sample && !s.return_logits && s.tokens.size() == 1 && s.banned_now.empty();
}

class Engine {
 public:
  // Allocates the KV cache and reserves the model's workspace for the options' limits on the
  // model's backend. `comm` must outlive the engine; null for a single rank.
  // `draft` (speculative decoding) is given to the rank options.draft_rank names, null elsewhere.
  static absl::StatusOr<std::unique_ptr<Engine>> create(std::unique_ptr<LlamaModel> model,
                                                        const EngineOptions& options, Communicator* comm,
                                                        std::unique_ptr<DraftModel> draft = nullptr);

  const LlamaModel& model() const { return *model_; }
  uint64_t cache_bytes() const { return cache_->bytes(); }
  const KvCacheShape& cache_shape() const { return cache_->shape(); }

  // Validates a step against the engine's state (ids in range, positions consistent with the
  // sequence's history, pages in range) and runs it. A collective failure is returned as is.
  absl::StatusOr<StepOutput> run_step(const StepInput& input);
  // Fills the tokens of every from_last_sample sequence with the last token this rank sampled for
  // it (run_step refuses them unfilled). INVALID_ARGUMENT, changing nothing, when such a sequence
  // carries tokens, does not sample, or its history does not end at start_pos (the coordinator and
  // this rank disagree on where it stands).
  absl::Status take_last_samples(StepInput& input) const;
  void release(const std::vector<uint64_t>& seq_ids);
  size_t live_sequences() const { return histories_.size(); }

 private:
  struct History {
    std::vector<int32_t> tokens;
    int32_t prompt_len = 0;
    std::vector<int32_t> dry_breakers;  // the last non-empty list a step sent
  };
  Engine() = default;
  absl::Status validate(const StepInput& input) const;
  // A sequence's sampling parameters with the DRY sequence breakers the worker kept from its
  // prefill (`h.dry_breakers`) when the request sent none.
  static SamplingParams sequence_sampling(const StepSequence& s, const History& h);
  // Points a sample row at `history`, whose first `prompt_len` ids (at most all) are the prompt.
  static void set_row_history(SampleRow& r, std::span<const int32_t> history, int32_t prompt_len);
  // What every step does first: each sequence's history updated to its tokens (and the draft's
  // cache knowledge cut to start_pos), the page copies run; returns the sampling sequences in input
  // order, with an empty entry for each in `out`.
  std::vector<const StepSequence*> start_step(const StepInput& input, StepOutput& out);
  // run_step's speculative round (engine_speculative.cpp), after start_step.
  absl::StatusOr<StepOutput> run_speculative_step(const StepInput& input,
                                                  const std::vector<const StepSequence*>& samplers, StepOutput out);
  // Sums `values` over the ranks (the drafting rank contributes, the others zeros) so every rank
  // holds the drafting rank's values; no-op for a single rank. values.size() <= spec_exchange_.
  absl::Status share_from_draft_rank(std::vector<float>& values);
  // Samples one token for each of `seqs` from its row rows[i] of `logits` (F32 [r, vocab] on the
  // backend's device; [0, vocab] on a layer-split rank without the head) on the backend, and
  // downloads the ids (and the logprob rows of sequences that ask, appended to (*logprobs)[i] on
  // ranks with the head); all ranks agree on the ids.
  absl::StatusOr<std::vector<int32_t>> sample_rows(const Tensor& logits, const std::vector<const StepSequence*>& seqs,
                                                   const std::vector<int64_t>& rows,
                                                   std::vector<std::vector<TokenLogprobs>>* logprobs);
  // Draws every row of `batch` (one per row of `logits`, F32 [r, vocab] on the device, r >= 1) on
  // the backend and downloads the ids; when a row has params.logprobs > 0, `host_logprobs` becomes
  // F32 [r, kLogprobWidth] holding those rows (SampleBatch::logprobs), else it is left undefined.
  absl::StatusOr<std::vector<int32_t>> draw(const Tensor& logits, SampleBatch& batch, Tensor& host_logprobs);

  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvCache> cache_;
  Communicator* comm_ = nullptr;
  EngineOptions options_;
  Tensor shared_tokens_;  // F32 [max_seqs] on the device: sampled ids shared in a layer split
  Tensor sampled_ids_;    // I32 [max(max_seqs, max_logit_rows)] on the device: the sampler's output
  Tensor sampled_logprobs_;  // F32 [same rows, kLogprobWidth] on the device: SampleBatch::logprobs
  int64_t sampling_history_ = 0;  // history tokens the backend's sampler buffers hold
  std::unique_ptr<DraftModel> draft_;  // on the drafting rank
  Tensor spec_exchange_;  // F32 [max_seqs * (kMaxDraftTokens + 2)]: proposals and verdicts shared
  std::map<uint64_t, History> histories_;
};

}  // namespace exl3
