// DraftModel: speculative decoding's proposer on the drafting rank. A whole small model with the
// target's vocabulary, on the rank's backend, with a KV cache of its own whose pages mirror the
// target's: the draft writes a sequence's position p into the physical page the target's page table
// gives for p, so the coordinator's page book covers both and nothing else needs allocating.
// Per sequence it remembers how many leading positions of the history its cache holds, and before
// proposing it catches up on the rest (the prompt, the tokens the last round accepted).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace exl3 {

// One sequence to propose for: its whole token history (prompt, then output; the last token is the
// one the round starts from), its prompt length, its page table (covering at least
// history.size() + tokens - 1 positions) and its sampling parameters.
struct DraftInput {
  uint64_t seq_id = 0;
  std::span<const int32_t> history;
  int32_t prompt_len = 0;
  std::span<const int32_t> page_table;
  SamplingParams params;
};

// `tokens` proposed tokens for positions history.size(), history.size() + 1, ..., each drawn from
// the draft's sampling distribution (`probs`, over the vocabulary) with u = philox_uniform(seed,
// position, kDraftStream).
struct Proposal {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> probs;
};

class DraftModel {
 public:
  // Loads the model in `model_dir` whole onto `backend`, with a cache of `num_pages` pages of
  // `page_size` tokens (the target's) at `cache_bits`, reserved for steps within `limits`.
  // INVALID_ARGUMENT when its vocabulary differs from `target_vocab` or its KV heads cannot take
  // `cache_bits`.
  static absl::StatusOr<std::unique_ptr<DraftModel>> load(const std::string& model_dir,
                                                          std::shared_ptr<Backend> backend, int64_t num_pages,
                                                          int64_t page_size, const StepLimits& limits,
                                                          int64_t target_vocab, const KvCacheBits& cache_bits = {});

  // Proposes `tokens` (>= 1) tokens for every input sequence, batched: first the catch-up forward
  // of the positions the draft's cache lacks (chunked to the step limits), then one single-token
  // forward per further proposal. Afterwards the cache holds positions up to the last proposal
  // but one.
  absl::StatusOr<std::vector<Proposal>> propose(std::span<const DraftInput> inputs, int32_t tokens);

  // After verification: the first `positions` positions of the sequence's history are the ones the
  // draft's cache holds correctly (tokens beyond were rejected or never run).
  void keep_positions(uint64_t seq_id, int64_t positions);
  void release(uint64_t seq_id) { cached_.erase(seq_id); }
  // The target's copy-on-write of page `src` into `dst`, mirrored in the draft's cache.
  void copy_page(int32_t src, int32_t dst) { cache_->copy_page(src, dst, model_->backend()); }

  const LlamaModel& model() const { return *model_; }
  uint64_t cache_bytes() const { return cache_->bytes(); }

 private:
  DraftModel() = default;

  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvCache> cache_;
  std::map<uint64_t, int64_t> cached_;  // positions the draft's cache holds, per sequence
};

}  // namespace exl3
