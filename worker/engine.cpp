// Step execution: batch assembly, multi-iteration decode and sampling.
#include "worker/engine.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace exl3 {

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<LlamaModel> model,
                                                       const EngineOptions& options, Communicator* comm,
                                                       std::unique_ptr<DraftModel> draft) {
  std::unique_ptr<Engine> e(new Engine());
  e->model_ = std::move(model);
  e->comm_ = comm;
  e->options_ = options;
  Backend& be = e->model_->backend();
  EXL3_ASSIGN_OR_RETURN(
      e->cache_, KvCache::create(e->model_->cache_shape(options.num_pages, options.page_size, options.cache_bits), be));
  StepLimits limits;
  limits.max_step_tokens = options.max_step_tokens;
  limits.max_seqs = options.max_seqs;
  limits.max_pages_per_seq = options.num_pages;
  limits.max_logit_rows = options.max_logit_rows;
  limits.step_graphs = options.step_graphs;
  EXL3_RETURN_IF_ERROR(e->model_->reserve(limits));
  EXL3_ASSIGN_OR_RETURN(e->shared_tokens_, be.allocate(DType::kF32, {options.max_seqs}, "sampled token exchange"));
  // The sampler runs over every logits row of a step (rows not sampled are greedy and ignored);
  // its histories are sized for a KV cache's worth of tokens and grow when a step needs more.
  const int64_t sample_rows = std::max(options.max_seqs, options.max_logit_rows);
  e->sampling_history_ = options.num_pages * options.page_size;
  EXL3_RETURN_IF_ERROR(be.reserve_sampling(sample_rows, e->model_->config().vocab_size, e->sampling_history_));
  EXL3_ASSIGN_OR_RETURN(e->sampled_ids_, be.allocate(DType::kI32, {sample_rows}, "sampled token ids"));
  EXL3_ASSIGN_OR_RETURN(e->sampled_logprobs_,
                        be.allocate(DType::kF32, {sample_rows, kLogprobWidth}, "sampled token logprobs"));
  if (options.draft_rank >= 0) {
    const int rank = comm == nullptr ? 0 : comm->rank();
    if ((rank == options.draft_rank) != (draft != nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": the drafting rank is ", options.draft_rank,
                                                     draft != nullptr ? ", yet this rank was given a draft model"
                                                                      : ", yet it has no draft model"));
    }
    if (draft != nullptr && !e->model_->shard().has_head) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " drafts but does not compute the head"));
    }
    EXL3_ASSIGN_OR_RETURN(e->spec_exchange_, be.allocate(DType::kF32, {options.max_seqs * (kMaxDraftTokens + 2)},
                                                         "speculative decoding exchange"));
    e->draft_ = std::move(draft);
  }
  return e;
}

absl::Status Engine::validate(const StepInput& input) const {
  const int64_t vocab = model_->config().vocab_size, pages = cache_->shape().num_pages;
  const int64_t page_size = cache_->shape().page_size;
  if (input.decode_steps < 1) return absl::InvalidArgumentError("decode_steps must be >= 1");
  const bool speculative = input.speculative && input.decode_steps > 1;
  if (speculative && input.decode_steps - 1 > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat("a speculative step of ", input.decode_steps - 1,
                                                   " draft tokens; at most ", kMaxDraftTokens));
  }
  int64_t tokens = 0, rows = 0;
  for (const StepSequence& s : input.sequences) {
    tokens += static_cast<int64_t>(s.tokens.size());
    rows += s.return_logits ? static_cast<int64_t>(s.tokens.size()) : s.sample ? 1 : 0;
    if (speculative && speculates(s)) {  // the proposals run and are scored too
      tokens += input.decode_steps - 1;
      rows += input.decode_steps - 1;
    }
  }
  if (tokens > options_.max_step_tokens || static_cast<int64_t>(input.sequences.size()) > options_.max_seqs ||
      rows > options_.max_logit_rows) {
    return absl::InvalidArgumentError(absl::StrCat("step of ", tokens, " tokens, ", input.sequences.size(),
                                                   " sequences, ", rows, " logits rows exceeds the worker's limits (",
                                                   options_.max_step_tokens, ", ", options_.max_seqs, ", ",
                                                   options_.max_logit_rows, ")"));
  }
  for (const auto& [src, dst] : input.page_copies) {
    if (src < 0 || src >= pages || dst < 0 || dst >= pages || src == dst) {
      return absl::InvalidArgumentError(absl::StrCat("page copy ", src, " -> ", dst, " outside [0, ", pages,
                                                     ") or onto itself"));
    }
  }
  for (const StepSequence& s : input.sequences) {
    if (s.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, " has no tokens",
                                                     s.from_last_sample ? " (from_last_sample not filled)" : ""));
    }
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": token ", t, " outside [0, ", vocab, ")"));
      }
    }
    if (!s.history_prefix.empty() && static_cast<int64_t>(s.history_prefix.size()) != s.start_pos) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": history prefix of ",
                                                     s.history_prefix.size(), " tokens at start position ", s.start_pos));
    }
    for (int32_t t : s.history_prefix) {
      if (t < 0 || t >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": history token ", t, " outside [0, ",
                                                       vocab, ")"));
      }
    }
    for (size_t i = 0; i < s.banned_now.size(); ++i) {
      if (s.banned_now[i] < 0 || s.banned_now[i] >= vocab || (i > 0 && s.banned_now[i] <= s.banned_now[i - 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", s.seq_id, ": banned_now must be strictly increasing ids in [0, ", vocab, ")"));
      }
    }
    if (!s.banned_now.empty() && static_cast<int64_t>(s.sampling.banned_ids.size() + s.banned_now.size()) >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": banned_ids and banned_now ban all ",
                                                     vocab, " tokens"));
    }
    auto it = histories_.find(s.seq_id);
    const int64_t known = !s.history_prefix.empty()       ? static_cast<int64_t>(s.history_prefix.size())
                          : it == histories_.end() ? 0
                                                   : static_cast<int64_t>(it->second.tokens.size());
    if (s.start_pos < 0 || s.start_pos > known) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": start position ", s.start_pos,
                                                     " but the worker knows ", known, " tokens"));
    }
    const int64_t needed = s.start_pos + static_cast<int64_t>(s.tokens.size()) + (s.sample ? input.decode_steps - 1 : 0);
    if (static_cast<int64_t>(s.page_table.size()) * page_size < needed) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": ", s.page_table.size(),
                                                     " pages cannot hold ", needed, " positions"));
    }
    for (int32_t p : s.page_table) {
      if (p < 0 || p >= pages) return absl::InvalidArgumentError(absl::StrCat("page ", p, " outside [0, ", pages, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Engine::sample_rows(const Tensor& logits,
                                                         const std::vector<const StepSequence*>& seqs,
                                                         const std::vector<int64_t>& rows,
                                                         std::vector<std::vector<TokenLogprobs>>* logprobs) {
  Backend& be = model_->backend();
  std::vector<float> sampled(seqs.size(), 0.0f);
  const int64_t num_rows = logits.dim(0);
  if (num_rows > 0) {
    EXL3_CHECK_EQ(rows.size(), seqs.size());
    // Rows not sampled (returned logits of earlier tokens) draw greedily with no history.
    SampleBatch batch;
    batch.rows.assign(static_cast<size_t>(num_rows), SampleRow{});
    for (SampleRow& r : batch.rows) r.params.temperature = 0.0f;
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXL3_CHECK(rows[i] >= 0 && rows[i] < num_rows, "sampled row ", rows[i], " of ", num_rows);
      const History& h = histories_.at(seqs[i]->seq_id);
      const std::span<const int32_t> all(h.tokens);
      SampleRow& r = batch.rows[rows[i]];
      r.params = sequence_sampling(*seqs[i], h);
      r.position = static_cast<int64_t>(all.size());
      if (!seqs[i]->banned_now.empty() &&
          r.position == seqs[i]->start_pos + static_cast<int64_t>(seqs[i]->tokens.size())) {  // the first draw
        std::vector<int32_t> bans;
        std::set_union(r.params.banned_ids.begin(), r.params.banned_ids.end(), seqs[i]->banned_now.begin(),
                       seqs[i]->banned_now.end(), std::back_inserter(bans));
        r.params.banned_ids = std::move(bans);
      }
      set_row_history(r, all, h.prompt_len);
    }
    Tensor host_lp;
    EXL3_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, draw(logits, batch, host_lp));
    const bool any_logprobs = host_lp.defined();
    for (size_t i = 0; i < seqs.size(); ++i) sampled[i] = static_cast<float>(ids[static_cast<size_t>(rows[i])]);
    for (size_t i = 0; any_logprobs && i < seqs.size(); ++i) {
      const int32_t n = static_cast<int32_t>(std::min<int64_t>(seqs[i]->sampling.logprobs, logits.dim(1)));
      if (seqs[i]->sampling.logprobs > 0) {
        (*logprobs)[i].push_back(read_logprob_row(host_lp.data<float>() + rows[i] * kLogprobWidth, n));
      }
    }
  }
  // In a layer split only the head rank has logits: share its tokens (ids < 2^24 are exact in fp32).
  if (model_->shard().mode == ShardMode::kLayers && comm_ != nullptr && comm_->world_size() > 1) {
    Tensor shared = shared_tokens_.rows(0, static_cast<int64_t>(sampled.size()));
    Tensor host = Tensor::from_vector(sampled, {static_cast<int64_t>(sampled.size())});
    be.upload(host, shared);
    EXL3_RETURN_IF_ERROR(comm_->all_reduce_sum(shared));
    EXL3_RETURN_IF_ERROR(comm_->flush());
    be.download(shared, host);
    std::copy_n(host.data<float>(), sampled.size(), sampled.begin());
  }
  std::vector<int32_t> out(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) out[i] = static_cast<int32_t>(sampled[i]);
  return out;
}

SamplingParams Engine::sequence_sampling(const StepSequence& s, const History& h) {
  SamplingParams p = s.sampling;
  if (p.dry_multiplier != 0.0f && p.dry_breakers.empty()) p.dry_breakers = h.dry_breakers;
  return p;
}

void Engine::set_row_history(SampleRow& r, std::span<const int32_t> history, int32_t prompt_len) {
  r.prompt_ids = history.first(std::min<size_t>(static_cast<size_t>(prompt_len), history.size()));
  r.output_ids = history.subspan(r.prompt_ids.size());
}

absl::StatusOr<std::vector<int32_t>> Engine::draw(const Tensor& logits, SampleBatch& batch, Tensor& host_logprobs) {
  Backend& be = model_->backend();
  const int64_t num_rows = logits.dim(0);
  EXL3_CHECK(num_rows >= 1 && static_cast<int64_t>(batch.rows.size()) == num_rows, "draw: ", batch.rows.size(),
             " sample rows for ", num_rows, " logits rows");
  const int64_t history = batch.history_tokens();
  if (history > sampling_history_) {
    sampling_history_ = std::max(history, 2 * sampling_history_);
    EXL3_RETURN_IF_ERROR(be.reserve_sampling(sampled_ids_.numel(), logits.dim(1), sampling_history_));
  }
  Tensor ids = sampled_ids_.rows(0, num_rows);
  Tensor lp = sampled_logprobs_.rows(0, num_rows);
  bool any_logprobs = false;
  for (const SampleRow& r : batch.rows) any_logprobs |= r.params.logprobs > 0;
  if (any_logprobs) batch.logprobs = &lp;
  be.sample(logits, batch, ids);
  Tensor host = Tensor::zeros(DType::kI32, {num_rows});
  be.download(ids, host);
  host_logprobs = any_logprobs ? Tensor::zeros(DType::kF32, {num_rows, kLogprobWidth}) : Tensor();
  if (any_logprobs) be.download(lp, host_logprobs);
  EXL3_RETURN_IF_ERROR(be.synchronize());
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + num_rows);
}

std::vector<const StepSequence*> Engine::start_step(const StepInput& input, StepOutput& out) {
  std::vector<const StepSequence*> samplers;
  for (const StepSequence& s : input.sequences) {
    History& h = histories_[s.seq_id];
    if (!s.history_prefix.empty()) h.tokens = s.history_prefix;  // positions reused from the prefix cache
    h.tokens.resize(s.start_pos);  // a recomputed (or rewound) sequence restarts from start_pos
    h.tokens.insert(h.tokens.end(), s.tokens.begin(), s.tokens.end());
    if (draft_ != nullptr) draft_->keep_positions(s.seq_id, s.start_pos);
    if (s.prompt_len > 0) h.prompt_len = s.prompt_len;
    if (!s.sampling.dry_breakers.empty()) h.dry_breakers = s.sampling.dry_breakers;
    if (s.sample) samplers.push_back(&s);
  }
  for (const StepSequence* s : samplers) out.tokens.push_back({s->seq_id, {}});
  out.logprobs.resize(samplers.size());
  // Copy-on-write pages first: the forward may write the copies' destinations (on the same stream).
  for (const auto& [src, dst] : input.page_copies) {
    cache_->copy_page(src, dst, model_->backend());
    if (draft_ != nullptr) draft_->copy_page(src, dst);
  }
  return samplers;
}

absl::StatusOr<StepOutput> Engine::run_step(const StepInput& input) {
  EXL3_RETURN_IF_ERROR(validate(input));
  const bool speculative = input.speculative && input.decode_steps > 1;
  if (speculative && options_.draft_rank < 0) {
    return absl::InvalidArgumentError("a speculative step, but no draft model is loaded");
  }
  StepOutput out;
  const std::vector<const StepSequence*> samplers = start_step(input, out);
  if (speculative) return run_speculative_step(input, samplers, std::move(out));
  std::vector<BatchEntry> batch;
  for (const StepSequence& s : input.sequences) {
    const LogitsMode mode = s.return_logits ? LogitsMode::kAll : s.sample ? LogitsMode::kLast : LogitsMode::kNone;
    batch.push_back(BatchEntry{s.tokens, s.start_pos, s.page_table, mode});
  }

  // Logits stay on the device; only requested full logits are downloaded.
  EXL3_ASSIGN_OR_RETURN(Tensor logits, model_->forward_batch_device(batch, *cache_, comm_));
  std::vector<int64_t> sample_rows_of;  // the logits row of each sampling sequence
  if (logits.dim(0) > 0) {
    Backend& be = model_->backend();
    const int64_t vocab = logits.dim(1);
    int64_t row = 0;
    for (const StepSequence& s : input.sequences) {
      const int64_t len = static_cast<int64_t>(s.tokens.size());
      const int64_t rows = s.return_logits ? len : s.sample ? 1 : 0;
      if (s.return_logits) {
        Tensor full = Tensor::zeros(DType::kF32, {len, vocab});
        be.download(logits.rows(row, len), full);
        out.logits.push_back({s.seq_id, std::move(full)});
      }
      if (s.sample) sample_rows_of.push_back(row + rows - 1);
      row += rows;
    }
    EXL3_RETURN_IF_ERROR(be.synchronize());
  }
  for (int32_t iter = 0; iter < input.decode_steps && !samplers.empty(); ++iter) {
    EXL3_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, sample_rows(logits, samplers, sample_rows_of, &out.logprobs));
    std::vector<int32_t> next_tokens(samplers.size());
    for (size_t i = 0; i < samplers.size(); ++i) {
      histories_[samplers[i]->seq_id].tokens.push_back(tokens[i]);
      out.tokens[i].second.push_back(tokens[i]);
      next_tokens[i] = tokens[i];
    }
    if (iter + 1 == input.decode_steps) break;
    batch.clear();
    for (size_t i = 0; i < samplers.size(); ++i) {
      const History& h = histories_[samplers[i]->seq_id];
      batch.push_back(BatchEntry{std::span<const int32_t>(&h.tokens.back(), 1),
                                 static_cast<int32_t>(h.tokens.size() - 1), samplers[i]->page_table, LogitsMode::kLast});
    }
    EXL3_ASSIGN_OR_RETURN(logits, model_->forward_batch_device(batch, *cache_, comm_));
    sample_rows_of.resize(samplers.size());
    for (size_t i = 0; i < samplers.size(); ++i) sample_rows_of[i] = static_cast<int64_t>(i);
  }
  return out;
}

absl::Status Engine::take_last_samples(StepInput& input) const {
  for (const StepSequence& s : input.sequences) {
    if (!s.from_last_sample) continue;
    if (!s.tokens.empty() || !s.sample) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": from_last_sample with ", s.tokens.size(),
                                                     " tokens", s.sample ? "" : " and no sampling"));
    }
    auto it = histories_.find(s.seq_id);
    const int64_t known = it == histories_.end() ? 0 : static_cast<int64_t>(it->second.tokens.size());
    if (s.start_pos < 0 || known != static_cast<int64_t>(s.start_pos) + 1) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": from_last_sample at position ",
                                                     s.start_pos, " but this rank knows ", known,
                                                     " tokens (its last sample is at ", known - 1, ")"));
    }
  }
  for (StepSequence& s : input.sequences) {
    if (s.from_last_sample) s.tokens.assign(1, histories_.at(s.seq_id).tokens.back());
  }
  return absl::OkStatus();
}

void Engine::release(const std::vector<uint64_t>& seq_ids) {
  for (uint64_t id : seq_ids) {
    histories_.erase(id);
    if (draft_ != nullptr) draft_->release(id);
  }
}

}  // namespace exl3
