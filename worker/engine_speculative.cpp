// Speculative decoding's round inside a step (StepInput::speculative): the drafting rank's draft
// model proposes tokens, every rank runs the target over them in one forward, the drafting rank
// verifies the proposals (greedy ones against the target rows' argmaxes on the device, sampled ones
// by rejection sampling against the target's sampling distributions on the host), and
// the verdict (how many tokens, which) is shared so every rank appends the same tokens.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/speculative.h"
#include "worker/engine.h"

namespace exl3 {

absl::Status Engine::share_from_draft_rank(std::vector<float>& values) {
  if (comm_ == nullptr || comm_->world_size() <= 1 || values.empty()) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(values.size());
  EXL3_CHECK(n <= spec_exchange_.numel(), "speculative exchange of ", n, " values, room for ", spec_exchange_.numel());
  if (draft_ == nullptr) std::fill(values.begin(), values.end(), 0.0f);
  Backend& be = model_->backend();
  Tensor shared = spec_exchange_.rows(0, n);
  Tensor host = Tensor::from_vector(values, {n});
  be.upload(host, shared);
  EXL3_RETURN_IF_ERROR(comm_->all_reduce_sum(shared));
  EXL3_RETURN_IF_ERROR(comm_->flush());
  be.download(shared, host);  // waits for the collective
  std::copy_n(host.data<float>(), n, values.begin());
  return absl::OkStatus();
}

absl::StatusOr<StepOutput> Engine::run_speculative_step(const StepInput& input,
                                                         const std::vector<const StepSequence*>& samplers,
                                                         StepOutput out) {
  const int32_t n = input.decode_steps - 1;
  const int64_t vocab = model_->config().vocab_size;
  Backend& be = model_->backend();
  std::vector<size_t> spec;  // indices into samplers of the sequences that draft
  for (size_t i = 0; i < samplers.size(); ++i) {
    if (speculates(*samplers[i])) spec.push_back(i);
  }

  // Proposals, drawn on the drafting rank and shared as floats (ids < 2^24 are exact).
  const size_t ns = spec.size();
  std::vector<Proposal> proposals;
  std::vector<float> proposed(ns * static_cast<size_t>(n), 0.0f);
  if (draft_ != nullptr && ns > 0) {
    std::vector<DraftInput> inputs;
    for (size_t i : spec) {
      const History& h = histories_.at(samplers[i]->seq_id);
      inputs.push_back(DraftInput{samplers[i]->seq_id, h.tokens, h.prompt_len, samplers[i]->page_table,
                                  sequence_sampling(*samplers[i], h)});
    }
    EXL3_ASSIGN_OR_RETURN(proposals, draft_->propose(inputs, n));
    for (size_t k = 0; k < ns; ++k) {
      for (int32_t j = 0; j < n; ++j) proposed[k * n + j] = static_cast<float>(proposals[k].tokens[j]);
    }
  }
  EXL3_RETURN_IF_ERROR(share_from_draft_rank(proposed));

  // One target forward: each drafting sequence runs its last token and the proposals, with a logits
  // row per token (row j scores position history.size() + j).
  std::vector<std::vector<int32_t>> runs(ns);
  std::vector<BatchEntry> batch;
  {
    size_t k = 0;
    for (const StepSequence& s : input.sequences) {
      if (s.sample && speculates(s)) {
        std::vector<int32_t>& run = runs[k];
        run.push_back(s.tokens[0]);
        for (int32_t j = 0; j < n; ++j) {
          const int32_t t = static_cast<int32_t>(proposed[k * n + j]);
          if (t < 0 || t >= vocab) {
            return absl::InternalError(absl::StrCat("sequence ", s.seq_id, ": proposed token ", t, " outside [0, ",
                                                    vocab, ")"));
          }
          run.push_back(t);
        }
        batch.push_back(BatchEntry{run, s.start_pos, s.page_table, LogitsMode::kAll});
        ++k;
      } else {
        const LogitsMode mode = s.return_logits ? LogitsMode::kAll : s.sample ? LogitsMode::kLast : LogitsMode::kNone;
        batch.push_back(BatchEntry{s.tokens, s.start_pos, s.page_table, mode});
      }
    }
  }
  EXL3_ASSIGN_OR_RETURN(Tensor logits, model_->forward_batch_device(batch, *cache_, comm_));

  // Row bookkeeping (only ranks with the head have rows).
  std::vector<const StepSequence*> plain;  // sampling sequences that did not draft
  std::vector<size_t> plain_index;         // their index into samplers
  std::vector<int64_t> plain_rows;
  std::vector<int64_t> spec_rows(ns, 0);
  {
    int64_t row = 0;
    size_t k = 0, sampler = 0;
    for (const StepSequence& s : input.sequences) {
      const int64_t len = static_cast<int64_t>(s.tokens.size());
      if (s.sample && speculates(s)) {
        spec_rows[k++] = row;
        row += n + 1;
      } else {
        const int64_t rows = s.return_logits ? len : s.sample ? 1 : 0;
        if (s.return_logits && logits.dim(0) > 0) {
          Tensor full = Tensor::zeros(DType::kF32, {len, vocab});
          be.download(logits.rows(row, len), full);
          out.logits.push_back({s.seq_id, std::move(full)});
        }
        if (s.sample) {
          plain.push_back(&s);
          plain_index.push_back(sampler);
          plain_rows.push_back(row + rows - 1);
        }
        row += rows;
      }
      if (s.sample) ++sampler;
    }
  }
  if (!plain.empty()) {
    std::vector<std::vector<TokenLogprobs>> plain_logprobs(plain.size());
    EXL3_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, sample_rows(logits, plain, plain_rows, &plain_logprobs));
    for (size_t i = 0; i < plain.size(); ++i) {
      histories_[plain[i]->seq_id].tokens.push_back(tokens[i]);
      out.tokens[plain_index[i]].second.push_back(tokens[i]);
      out.logprobs[plain_index[i]] = std::move(plain_logprobs[i]);
    }
  }

  // Verification on the drafting rank: per sequence [count, tokens...] in a row of n + 2 floats.
  const size_t stride = static_cast<size_t>(n) + 2;
  std::vector<float> verdict(ns * stride, 0.0f);
  if (draft_ != nullptr && ns > 0) {
    const auto set_verdict = [&](size_t k, const std::vector<int32_t>& tokens) {
      verdict[k * stride] = static_cast<float>(tokens.size());
      for (size_t t = 0; t < tokens.size(); ++t) verdict[k * stride + 1 + t] = static_cast<float>(tokens[t]);
    };
    // Greedy sequences: every target distribution is one-hot at its row's processed argmax, so
    // rejection sampling keeps the proposals up to the first that is not the argmax of its row,
    // then that argmax (the bonus row's when all n are kept). The device sampler finds the argmaxes
    // (with the penalties over the context and the proposals before each row); only ids come back.
    std::vector<bool> greedy(ns, false);
    std::vector<std::vector<int32_t>> contexts(ns);  // a greedy row j sees the first `first + j`
    SampleBatch batch;
    batch.rows.assign(static_cast<size_t>(logits.dim(0)), SampleRow{});
    for (SampleRow& r : batch.rows) r.params.temperature = 0.0f;
    for (size_t k = 0; k < ns; ++k) {
      const StepSequence& s = *samplers[spec[k]];
      const History& h = histories_.at(s.seq_id);
      const SamplingParams params = sequence_sampling(s, h);
      if (params.temperature != 0.0f) continue;
      greedy[k] = true;
      contexts[k] = h.tokens;
      contexts[k].insert(contexts[k].end(), proposals[k].tokens.begin(), proposals[k].tokens.end());
      const size_t first = h.tokens.size();
      for (int32_t j = 0; j <= n; ++j) {
        SampleRow& r = batch.rows[static_cast<size_t>(spec_rows[k] + j)];
        r.params = params;
        r.position = static_cast<int64_t>(first) + j;
        const std::span<const int32_t> all =
            std::span<const int32_t>(contexts[k]).first(first + static_cast<size_t>(j));
        set_row_history(r, all, h.prompt_len);
      }
    }
    std::vector<int32_t> argmax;
    Tensor argmax_logprobs;
    if (std::find(greedy.begin(), greedy.end(), true) != greedy.end()) {
      EXL3_ASSIGN_OR_RETURN(argmax, draw(logits, batch, argmax_logprobs));
    }
    for (size_t k = 0; k < ns; ++k) {
      if (!greedy[k]) continue;
      std::vector<int32_t> tokens;
      for (int32_t j = 0; j <= n; ++j) {
        const int32_t best = argmax[static_cast<size_t>(spec_rows[k] + j)];
        tokens.push_back(best);
        if (j == n || proposals[k].tokens[j] != best) break;
      }
      set_verdict(k, tokens);
      const int32_t logprobs = samplers[spec[k]]->sampling.logprobs;
      for (size_t t = 0; logprobs > 0 && t < tokens.size(); ++t) {
        const float* row = argmax_logprobs.data<float>() + (spec_rows[k] + static_cast<int64_t>(t)) * kLogprobWidth;
        out.logprobs[spec[k]].push_back(
            read_logprob_row(row, static_cast<int32_t>(std::min<int64_t>(logprobs, vocab))));
      }
    }

    // Sampled sequences: rejection sampling against the target distributions, on the host.
    std::vector<Tensor> scored(ns);
    bool any_sampled = false;
    for (size_t k = 0; k < ns; ++k) {
      if (greedy[k]) continue;
      any_sampled = true;
      scored[k] = Tensor::zeros(DType::kF32, {n + 1, vocab});
      be.download(logits.rows(spec_rows[k], n + 1), scored[k]);
    }
    if (any_sampled) EXL3_RETURN_IF_ERROR(be.synchronize());
    for (size_t k = 0; k < ns; ++k) {
      if (greedy[k]) continue;
      const StepSequence& s = *samplers[spec[k]];
      const History& h = histories_.at(s.seq_id);
      const SamplingParams params = sequence_sampling(s, h);
      const int64_t first = static_cast<int64_t>(h.tokens.size());
      std::vector<int32_t> context = h.tokens;
      std::vector<std::vector<double>> target(static_cast<size_t>(n) + 1);
      for (int32_t j = 0; j <= n; ++j) {
        const std::span<const float> row(scored[k].data<float>() + j * vocab, static_cast<size_t>(vocab));
        const std::span<const int32_t> all(context);
        const size_t prompt = std::min<size_t>(static_cast<size_t>(h.prompt_len), all.size());
        target[j] = sampling_distribution(row, params, all.first(prompt), all.subspan(prompt), first + j).probs;
        if (j < n) context.push_back(proposals[k].tokens[j]);
      }
      const VerifyResult r = verify_proposal(proposals[k].tokens, proposals[k].probs, target, params.seed, first);
      set_verdict(k, r.tokens);
      for (size_t t = 0; params.logprobs > 0 && t < r.tokens.size(); ++t) {
        const std::span<const float> row(scored[k].data<float>() + static_cast<int64_t>(t) * vocab,
                                         static_cast<size_t>(vocab));
        const int32_t top = static_cast<int32_t>(std::min<int64_t>(params.logprobs, vocab));
        out.logprobs[spec[k]].push_back(token_logprobs_ref(row, r.tokens[t], top));
      }
    }
  }
  EXL3_RETURN_IF_ERROR(share_from_draft_rank(verdict));
  for (size_t k = 0; k < ns; ++k) {
    const StepSequence& s = *samplers[spec[k]];
    const int32_t count = static_cast<int32_t>(verdict[k * stride]);
    if (count < 1 || count > n + 1) {
      return absl::InternalError(absl::StrCat("sequence ", s.seq_id, ": the drafting rank kept ", count, " tokens of ",
                                              n + 1));
    }
    History& h = histories_.at(s.seq_id);
    const int64_t first = static_cast<int64_t>(h.tokens.size());
    for (int32_t t = 0; t < count; ++t) {
      const int32_t token = static_cast<int32_t>(verdict[k * stride + 1 + t]);
      h.tokens.push_back(token);
      out.tokens[spec[k]].second.push_back(token);
    }
    // The draft's cache holds the context and the accepted proposals; later positions are stale.
    if (draft_ != nullptr) draft_->keep_positions(s.seq_id, first + count - 1);
  }
  return out;
}

}  // namespace exl3
