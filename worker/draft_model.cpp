// Speculative decoding's draft model: loading, catch-up and proposal rounds.
#include "worker/draft_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/philox.h"
#include "kernels/speculative.h"
#include "worker/model/config.h"
#include "worker/model/model_shard.h"

namespace exl3 {

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::load(const std::string& model_dir,
                                                             std::shared_ptr<Backend> backend, int64_t num_pages,
                                                             int64_t page_size, const StepLimits& limits,
                                                             int64_t target_vocab, const KvCacheBits& cache_bits) {
  EXL3_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(model_dir));
  if (config.vocab_size != target_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("draft model ", model_dir, " has a vocabulary of ",
                                                   config.vocab_size, " tokens, the target ", target_vocab,
                                                   ": a draft must share the target's tokenizer"));
  }
  std::unique_ptr<DraftModel> draft(new DraftModel());
  Backend& be = *backend;
  EXL3_ASSIGN_OR_RETURN(draft->model_, LlamaModel::load_shard(model_dir, ModelShard::full(config), std::move(backend)));
  EXL3_ASSIGN_OR_RETURN(draft->cache_,
                        KvCache::create(draft->model_->cache_shape(num_pages, page_size, cache_bits), be));
  StepLimits draft_limits = limits;
  draft_limits.step_graphs = false;
  EXL3_RETURN_IF_ERROR(draft->model_->reserve(draft_limits));
  return draft;
}

absl::StatusOr<std::vector<Proposal>> DraftModel::propose(std::span<const DraftInput> inputs, int32_t tokens) {
  EXL3_CHECK(tokens >= 1, "propose: ", tokens, " tokens");
  const StepLimits& limits = model_->limits();
  const size_t n = inputs.size();
  std::vector<Proposal> out(n);
  // Each sequence's history with its proposals so far appended (the penalties' output tokens).
  std::vector<std::vector<int32_t>> extended(n);
  std::vector<int64_t> next(n);  // next history position the draft's cache lacks
  for (size_t i = 0; i < n; ++i) {
    const DraftInput& in = inputs[i];
    EXL3_CHECK(!in.history.empty(), "propose: sequence ", in.seq_id, " has no tokens");
    extended[i].assign(in.history.begin(), in.history.end());
    const int64_t last = static_cast<int64_t>(in.history.size()) - 1;
    auto it = cached_.find(in.seq_id);
    next[i] = std::min(it == cached_.end() ? 0 : it->second, last);
  }

  // Draws proposal number `k` of sequence i from its logits row.
  auto draw = [&](size_t i, std::span<const float> row) {
    const DraftInput& in = inputs[i];
    const std::span<const int32_t> all(extended[i]);
    const size_t prompt = std::min<size_t>(static_cast<size_t>(in.prompt_len), all.size());
    const int64_t position = static_cast<int64_t>(all.size());
    SampleDistribution d = sampling_distribution(row, in.params, all.first(prompt), all.subspan(prompt), position);
    const int32_t token = draw_from(d.probs, philox_uniform(in.params.seed, static_cast<uint64_t>(position), kDraftStream));
    out[i].tokens.push_back(token);
    out[i].probs.push_back(std::move(d.probs));
    extended[i].push_back(token);
  };

  // Catch-up: every sequence runs its missing positions up to and including its last token, in
  // forwards within the step limits; the chunk that reaches the last token yields its logits.
  for (;;) {
    std::vector<BatchEntry> batch;
    std::vector<size_t> owners;
    std::vector<bool> finishing;
    int64_t budget = limits.max_step_tokens;
    for (size_t i = 0; i < n && budget > 0 && static_cast<int64_t>(batch.size()) < limits.max_seqs; ++i) {
      const int64_t end = static_cast<int64_t>(inputs[i].history.size());
      if (next[i] >= end) continue;
      const int64_t len = std::min(end - next[i], budget);
      const bool last = next[i] + len == end;
      batch.push_back(BatchEntry{inputs[i].history.subspan(static_cast<size_t>(next[i]), static_cast<size_t>(len)),
                                 static_cast<int32_t>(next[i]), inputs[i].page_table,
                                 last ? LogitsMode::kLast : LogitsMode::kNone});
      owners.push_back(i);
      finishing.push_back(last);
      next[i] += len;
      budget -= len;
    }
    if (batch.empty()) break;
    EXL3_ASSIGN_OR_RETURN(const Tensor logits, model_->forward_batch(batch, *cache_, nullptr));
    const int64_t vocab = logits.dim(1);
    int64_t row = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      if (!finishing[b]) continue;
      draw(owners[b], std::span<const float>(logits.data<float>() + row * vocab, static_cast<size_t>(vocab)));
      ++row;
    }
  }

  // Further proposals: one token per sequence per forward.
  for (int32_t k = 1; k < tokens; ++k) {
    for (size_t first = 0; first < n; first += static_cast<size_t>(limits.max_seqs)) {
      const size_t count = std::min(n - first, static_cast<size_t>(limits.max_seqs));
      std::vector<BatchEntry> batch;
      for (size_t i = first; i < first + count; ++i) {
        const int32_t position = static_cast<int32_t>(extended[i].size()) - 1;
        batch.push_back(BatchEntry{std::span<const int32_t>(&extended[i].back(), 1), position, inputs[i].page_table,
                                   LogitsMode::kLast});
      }
      EXL3_ASSIGN_OR_RETURN(const Tensor logits, model_->forward_batch(batch, *cache_, nullptr));
      const int64_t vocab = logits.dim(1);
      for (size_t b = 0; b < count; ++b) {
        draw(first + b, std::span<const float>(logits.data<float>() + static_cast<int64_t>(b) * vocab,
                                               static_cast<size_t>(vocab)));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    cached_[inputs[i].seq_id] = static_cast<int64_t>(extended[i].size()) - 1;
  }
  return out;
}

void DraftModel::keep_positions(uint64_t seq_id, int64_t positions) {
  auto it = cached_.find(seq_id);
  if (it != cached_.end()) it->second = std::min(it->second, positions);
}

}  // namespace exl3
