// Scheduler (see scheduler.h for the API and the policies).
//
// Why these policies: recomputation instead of swapping keeps the coordinator free of any KV data
// (it only ever moves token ids), and the counter-based RNG makes a recomputed sequence sample the
// very tokens it would have sampled. Preempting the newest sequence keeps the oldest one always
// progressing, so the system cannot livelock. Strict FIFO admission (no skipping a large head
// request for smaller ones behind it) keeps latency predictable and starves no one; the cost is
// some head-of-line blocking when the cache is nearly full. Prefix reuse keeps computed pages
// after their sequence ends because agents and chats resend the same long prefixes; letting the
// head wait for a running sequence that is prefilling its prefix trades a little latency of the
// head for computing that prefix once instead of once per request.
#include "coordinator/scheduler/scheduler.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace exl3 {

absl::Status validate_scheduler_config(const SchedulerConfig& c) {
  const std::pair<const char*, int32_t> fields[] = {
      {"num_pages", c.num_pages},         {"page_size", c.page_size},
      {"max_batch", c.max_batch},         {"max_step_tokens", c.max_step_tokens},
      {"prefill_chunk", c.prefill_chunk}, {"max_queue", c.max_queue},
      {"decode_steps", c.decode_steps}};
  for (const auto& [name, value] : fields) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("scheduler ", name, " must be >= 1, got ", value));
    }
  }
  if (c.speculative && static_cast<int64_t>(c.max_step_tokens) < static_cast<int64_t>(c.max_batch) * c.decode_steps) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler max_step_tokens (", c.max_step_tokens,
                                                   ") must be >= max_batch x decode_steps (", c.max_batch, " x ",
                                                   c.decode_steps, ") when speculative: each decoding sequence "
                                                   "runs its token and its proposals"));
  }
  if (c.pipeline && c.speculative) {
    return absl::InvalidArgumentError(
        "scheduler pipeline and speculative cannot be combined: a speculative round returns a variable number of "
        "tokens, so the next step cannot be planned before it completes");
  }
  if (c.max_step_tokens < c.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler max_step_tokens (", c.max_step_tokens,
                                                   ") must be >= max_batch (", c.max_batch,
                                                   ") so that every running sequence can decode in each step"));
  }
  return absl::OkStatus();
}

namespace {

const SchedulerConfig& checked(const SchedulerConfig& config) {
  EXL3_CHECK_OK(validate_scheduler_config(config));
  return config;
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config)
    : config_(checked(config)),
      pages_(config_.num_pages, config_.page_size, config_.prefix_cache),
      batch_size_counts_(config_.max_batch + 1) {}

absl::StatusOr<SeqId> Scheduler::submit(ValidatedRequest request) {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_ids.size());
  if (prompt_len == 0 || request.max_new_tokens < 1 || prompt_len + request.max_new_tokens > request.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("request not validated: prompt of ", prompt_len,
                                                   " tokens, max_new_tokens ", request.max_new_tokens, ", max_context ",
                                                   request.max_context));
  }
  // The most positions a sequence ever writes: its last token is sampled, never fed.
  const int64_t max_positions = prompt_len + request.max_new_tokens - 1;
  const int64_t capacity = static_cast<int64_t>(config_.num_pages) * config_.page_size;
  if (max_positions > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request needs up to ", max_positions, " KV positions (prompt ", prompt_len, " + max_new_tokens ",
        request.max_new_tokens, " - 1) but the whole cache holds ", capacity, " (", config_.num_pages, " pages of ",
        config_.page_size, "); it can never run: lower stopping.max_new_tokens or the prompt"));
  }
  if (static_cast<int64_t>(queue_.size()) >= config_.max_queue) {
    return absl::ResourceExhaustedError(absl::StrCat("request queue is full (", queue_.size(), " waiting, --max-queue ",
                                                     config_.max_queue, "); retry later"));
  }
  const SeqId id = next_seq_id_++;
  Sequence seq;
  seq.prompt_len = static_cast<int32_t>(prompt_len);
  seq.tokens = request.prompt_ids;
  seq.request = std::move(request);
  seqs_.emplace(id, std::move(seq));
  queue_.insert(id);
  ++submitted_;
  prompt_tokens_ += prompt_len;
  return id;
}

// Pages held from admission: every known token plus one step of decoding, capped at the last
// position the sequence can ever write (token_limit - 1).
int32_t Scheduler::reserve_pages(const Sequence& seq) const {
  const int64_t positions =
      std::min<int64_t>(static_cast<int64_t>(seq.num_known()) + config_.decode_steps, seq.token_limit() - 1);
  return pages_for(positions, config_.page_size);
}

// Pages a sampling sequence needs for the next step: its pending tokens and up to decode_steps - 1
// fed-back samples, capped the same way.
int32_t Scheduler::step_pages(const Sequence& seq, const Position& at) const {
  const int64_t positions =
      std::min<int64_t>(static_cast<int64_t>(at.known) + config_.decode_steps - 1, seq.token_limit() - 1);
  return pages_for(positions, config_.page_size);
}

bool Scheduler::entry_applies(const InFlightEntry& entry, const Sequence& seq) const {
  return seq.running && entry.epoch == seq.epoch && entry.start_pos == seq.num_computed &&
         (!entry.sample || entry.start_pos + entry.num_tokens == seq.num_known());
}

Scheduler::Position Scheduler::position(SeqId id, const Sequence& seq) const {
  if (auto it = ahead_.find(id); it != ahead_.end()) return it->second;
  return Position{seq.num_computed, seq.num_known(), false, false};
}

void Scheduler::requeue(SeqId id) {
  Sequence& seq = seqs_.at(id);
  EXL3_CHECK(seq.running, "requeueing sequence ", id, " that is not running");
  pages_.release(seq.pages);
  seq.chain = PrefixChain{};
  seq.num_computed = 0;
  seq.running = false;
  if (seq.sent) released_.push_back(id);
  seq.sent = false;
  running_.erase(id);
  queue_.insert(id);
  ++seq.epoch;
  ahead_.erase(id);
  drop_rewind_copies(id, /*only_stale=*/false);
}

void Scheduler::preempt(SeqId id) {
  requeue(id);
  ++preemptions_;
}

// Oldest first, each decoding sequence gets the pages its next step needs; when the cache is out
// of pages the newest running sequence is preempted (possibly the one asking, when it is newest).
void Scheduler::grow_decodes() {
  const std::vector<SeqId> ids(running_.begin(), running_.end());
  for (const SeqId id : ids) {
    if (running_.count(id) == 0) continue;  // preempted for an older sequence
    Sequence& seq = seqs_.at(id);
    const Position at = position(id, seq);
    if (at.pending() != 1 || at.ends) continue;  // prefilling: its reserve covers the whole prefill
    const int32_t need = step_pages(seq, at) - static_cast<int32_t>(seq.pages.size());
    if (need <= 0) continue;
    while (need > pages_.available()) {
      const SeqId victim = *running_.rbegin();
      preempt(victim);
      if (victim == id) break;
    }
    if (seq.running) EXL3_CHECK(pages_.allocate(need, seq.pages), "allocation after preemption");
  }
}

bool Scheduler::wait_for_prefix(const Sequence& seq, int32_t reused) const {
  if (!config_.prefix_cache) return false;
  const std::span<const int32_t> head(seq.tokens.data(), static_cast<size_t>(seq.num_known() - 1));
  for (const SeqId id : running_) {
    const Sequence& other = seqs_.at(id);
    if (other.num_pending() <= 1) continue;
    const size_t n = std::min(head.size(), other.tokens.size());
    const int32_t common = static_cast<int32_t>(
        std::mismatch(head.begin(), head.begin() + n, other.tokens.begin()).first - head.begin());
    if (common > reused && common > other.num_computed) return true;
  }
  return false;
}

void Scheduler::admit(std::vector<PageCopy>& copies, std::vector<SeqId>& copied) {
  while (!queue_.empty() && static_cast<int32_t>(running_.size()) < config_.max_batch) {
    const SeqId id = *queue_.begin();
    Sequence& seq = seqs_.at(id);
    // Never the last known token: its logits are needed (it is sampled from).
    const PrefixMatch match = pages_.match(seq.tokens, seq.num_known() - 1);
    const int32_t reused = match.tokens(config_.page_size);
    if (wait_for_prefix(seq, reused)) break;  // strict FIFO: the head waits
    const int32_t shared = static_cast<int32_t>(match.shared_pages.size());
    const int32_t need = reserve_pages(seq) - shared;
    EXL3_CHECK(need >= 1, "sequence ", id, " reuses ", reused, " of ", seq.num_known(), " positions");
    if (need > pages_.available() - pages_.cached_in(match)) break;
    pages_.acquire(match, seq.pages);
    EXL3_CHECK(pages_.allocate(need, seq.pages), "allocation of ", need, " pages after the check");
    if (match.copy_source >= 0) {
      copies.push_back({match.copy_source, seq.pages[shared]});
      copied.push_back(id);
    }
    seq.num_computed = reused;
    seq.chain = match.chain;
    prompt_tokens_reused_ += std::min(reused, seq.prompt_len);
    seq.running = true;
    queue_.erase(queue_.begin());
    running_.insert(id);
  }
}

std::optional<StepPlan> Scheduler::next_step() {
  EXL3_CHECK(steps_in_flight() < max_steps_in_flight(config_), "next_step() while step ",
             in_flight_.empty() ? 0 : in_flight_.back().step_id, " is in flight");
  // Pipelining: where the in-flight step leaves the sequences it moves as planned.
  ahead_.clear();
  if (!in_flight_.empty()) {
    const InFlightStep& last = in_flight_.back();
    for (const InFlightEntry& e : last.entries) {
      auto it = seqs_.find(e.seq_id);
      if (it == seqs_.end() || !entry_applies(e, it->second)) continue;
      const Sequence& seq = it->second;
      Position at;
      if (e.sample) {
        at.known = e.start_pos + e.num_tokens + last.decode_steps;
        at.computed = at.known - 1;
        at.from_last_sample = true;
        at.ends = at.known >= seq.token_limit();
      } else {
        at.known = seq.num_known();
        at.computed = e.start_pos + e.num_tokens;
      }
      ahead_[e.seq_id] = at;
    }
  }
  grow_decodes();
  StepPlan plan;
  InFlightStep record;
  // Rewinds' copies first (their sequences are running: each has its decode in this plan).
  for (const auto& [id, copy] : rewind_copies_) {
    plan.page_copies.push_back(copy);
    record.copied.push_back(id);
  }
  rewind_copies_.clear();
  admit(plan.page_copies, record.copied);
  // Copy sources are pinned only while this plan is made: the copies run before any write of it.
  pages_.unpin_all();

  int32_t budget = config_.max_step_tokens;
  std::vector<int32_t> sample_limits;  // token_limit - known of each sampling entry
  auto add = [&](SeqId id, Sequence& seq, const Position& at, int32_t count) {
    SequencePlan entry;
    entry.seq_id = id;
    if (at.from_last_sample) {
      EXL3_CHECK(count == 1, "sequence ", id, " continues from its last sample with ", count, " tokens");
      entry.from_last_sample = true;
    } else {
      entry.tokens.assign(seq.tokens.begin() + at.computed, seq.tokens.begin() + at.computed + count);
    }
    entry.start_pos = at.computed;
    entry.page_table = seq.pages;
    entry.sample = at.computed + count == at.known;
    entry.sampling = seq.request.sampling;
    entry.prompt_len = seq.prompt_len;
    if (!seq.sent && at.computed > 0) {
      entry.history_prefix.assign(seq.tokens.begin(), seq.tokens.begin() + at.computed);
    }
    if (entry.sample) {
      auto bans = seq.bans.find(at.known - seq.prompt_len);
      if (bans != seq.bans.end()) entry.banned_now = bans->second;
      sample_limits.push_back(seq.token_limit() - at.known);
    }
    record.entries.push_back({id, at.computed, count, entry.sample, seq.epoch});
    plan.sequences.push_back(std::move(entry));
    budget -= count;
  };
  // Decodes first (one token each; max_step_tokens >= max_batch >= running, so all fit), then
  // prefill chunks oldest first while the token budget lasts.
  for (const SeqId id : running_) {
    Sequence& seq = seqs_.at(id);
    const Position at = position(id, seq);
    if (at.pending() != 1 || at.ends) continue;
    add(id, seq, at, 1);
    if (config_.speculative) budget -= config_.decode_steps - 1;  // the proposals run too
  }
  for (const SeqId id : running_) {
    Sequence& seq = seqs_.at(id);
    const Position at = position(id, seq);
    if (at.pending() <= 1) continue;
    const int32_t chunk = std::min({at.pending(), config_.prefill_chunk, budget});
    if (chunk <= 0) break;
    add(id, seq, at, chunk);
  }
  ahead_.clear();
  if (plan.sequences.empty()) {
    EXL3_CHECK(plan.page_copies.empty(), "page copies without a sequence to run");
    return std::nullopt;
  }

  int32_t decode_steps = config_.decode_steps;
  for (const int32_t limit : sample_limits) decode_steps = std::min(decode_steps, limit);
  EXL3_CHECK(decode_steps >= 1, "decode_steps ", decode_steps);
  for (const SequencePlan& entry : plan.sequences) seqs_.at(entry.seq_id).sent = true;

  plan.step_id = next_step_id_++;
  plan.decode_steps = decode_steps;
  plan.released = std::move(released_);
  released_.clear();
  record.step_id = plan.step_id;
  record.decode_steps = decode_steps;
  in_flight_.push_back(std::move(record));
  return plan;
}

std::optional<FinishReason> Scheduler::stop_reason(const Sequence& seq, int32_t token) const {
  const ValidatedRequest& r = seq.request;
  if (std::find(r.eos_token_ids.begin(), r.eos_token_ids.end(), token) != r.eos_token_ids.end()) {
    return FinishReason::kEos;
  }
  if (std::binary_search(r.stop_token_ids.begin(), r.stop_token_ids.end(), token)) return FinishReason::kStopToken;
  const int32_t generated = seq.num_known() - seq.prompt_len;
  if (generated >= r.max_new_tokens) return r.max_new_tokens_set ? FinishReason::kLength : FinishReason::kContext;
  if (seq.num_known() >= r.max_context) return FinishReason::kContext;
  return std::nullopt;
}

absl::StatusOr<std::vector<SequenceUpdate>> Scheduler::complete_step(const StepOutcome& outcome) {
  if (in_flight_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("step ", outcome.step_id, " completed but no step is in flight"));
  }
  const InFlightStep& step = in_flight_.front();
  if (outcome.step_id != step.step_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("completed step ", outcome.step_id, " but step ", step.step_id, " is the oldest in flight"));
  }
  // Validate everything before changing anything. results[i] belongs to step.entries[i].
  std::vector<const SequenceResult*> results(step.entries.size(), nullptr);
  for (const SequenceResult& result : outcome.sequences) {
    size_t i = 0;
    while (i < step.entries.size() && step.entries[i].seq_id != result.seq_id) ++i;
    if (i == step.entries.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step.step_id, ": result for sequence ", result.seq_id, " that is not in the step"));
    }
    if (results[i] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step.step_id, ": two results for sequence ", result.seq_id));
    }
    results[i] = &result;
  }
  // Entries that apply (the others: ended while the step ran, or void, see Pipelining).
  std::vector<bool> applies(step.entries.size(), false);
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const InFlightEntry& entry = step.entries[i];
    auto it = seqs_.find(entry.seq_id);
    applies[i] = it != seqs_.end() && entry_applies(entry, it->second);
    if (!applies[i]) continue;
    const size_t count = results[i] == nullptr ? 0 : results[i]->token_ids.size();
    if (!entry.sample && count != 0) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id, ": sequence ", entry.seq_id, " reported ",
                                                     count, " tokens but did not sample"));
    }
    if (entry.sample && (count < 1 || count > static_cast<size_t>(step.decode_steps))) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id, ": sequence ", entry.seq_id, " reported ",
                                                     count, " tokens, expected 1..", step.decode_steps));
    }
  }

  std::vector<SequenceUpdate> updates;
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const InFlightEntry& entry = step.entries[i];
    if (!applies[i]) continue;
    Sequence& seq = seqs_.at(entry.seq_id);
    seq.num_computed += entry.num_tokens;
    prompt_tokens_computed_ += std::max(0, std::min(entry.start_pos + entry.num_tokens, seq.prompt_len) - entry.start_pos);
    if (!entry.sample) continue;
    SequenceUpdate update;
    update.seq_id = entry.seq_id;
    for (const int32_t token : results[i]->token_ids) {
      seq.tokens.push_back(token);
      update.new_tokens.push_back(token);
      ++generated_tokens_;
      update.finish_reason = stop_reason(seq, token);
      if (update.finish_reason.has_value()) break;
    }
    // Every sampled token but the last was fed back in a later iteration of the step.
    seq.num_computed = seq.num_known() - 1;
    pages_.record(seq.tokens, seq.pages, seq.num_computed, seq.chain);
    if (update.finish_reason.has_value()) {
      end_sequence(entry.seq_id);
      ++completed_;
    }
    updates.push_back(std::move(update));
  }
  // Positions computed in this step (and those copied into admitted sequences' pages) now hold KV.
  for (const SeqId id : running_) {
    Sequence& seq = seqs_.at(id);
    pages_.record(seq.tokens, seq.pages, seq.num_computed, seq.chain);
  }
  const int32_t batch = static_cast<int32_t>(step.entries.size());
  ++steps_;
  ++batch_size_counts_[batch];
  largest_batch_ = std::max(largest_batch_, batch);
  in_flight_.pop_front();
  return updates;
}

// A sequence admitted (or rewound) with a page copy in the abandoned step relied on that copy:
// back to the queue, so it is matched again when re-admitted.
void Scheduler::abandon_step() {
  if (in_flight_.empty()) return;
  const std::vector<SeqId> copied = in_flight_.front().copied;
  in_flight_.pop_front();
  for (const SeqId id : copied) {
    auto it = seqs_.find(id);
    if (it != seqs_.end() && it->second.running) requeue(id);
  }
}

void Scheduler::end_sequence(SeqId id) {
  Sequence& seq = seqs_.at(id);
  if (seq.running) {
    pages_.release(seq.pages);
    running_.erase(id);
  } else {
    queue_.erase(id);
  }
  if (seq.sent) released_.push_back(id);
  drop_rewind_copies(id, /*only_stale=*/false);
  seqs_.erase(id);
}

void Scheduler::drop_rewind_copies(SeqId id, bool only_stale) {
  const std::vector<int32_t>* pages = only_stale ? &seqs_.at(id).pages : nullptr;
  std::erase_if(rewind_copies_, [&](const std::pair<SeqId, PageCopy>& c) {
    if (c.first != id) return false;
    if (pages != nullptr && std::find(pages->begin(), pages->end(), c.second.dst) != pages->end()) return false;
    pages_.unpin(c.second.src);
    return true;
  });
}

absl::Status Scheduler::rewind(SeqId id, int32_t output_tokens, int32_t banned_token) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("rewind: no live sequence ", id));
  if (steps_in_flight() >= max_steps_in_flight(config_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("rewind of sequence ", id, " while step ", in_flight_.back().step_id, " is in flight"));
  }
  Sequence& seq = it->second;
  const int32_t generated = seq.num_known() - seq.prompt_len;
  if (output_tokens < 0 || output_tokens >= generated) {
    return absl::InvalidArgumentError(absl::StrCat("rewind of sequence ", id, " to ", output_tokens,
                                                   " output tokens: it has ", generated));
  }
  const int32_t sampled = seq.tokens[seq.prompt_len + output_tokens];
  if (sampled != banned_token) {
    return absl::InvalidArgumentError(absl::StrCat("rewind of sequence ", id, ": token ", banned_token,
                                                   " to ban at output position ", output_tokens, " but it sampled ",
                                                   sampled, " there"));
  }
  if (seq.rewinds >= kMaxRewinds) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sequence ", id, " already rewound ", seq.rewinds, " times (the limit)"));
  }
  std::vector<int32_t> bans;
  if (auto b = seq.bans.find(output_tokens); b != seq.bans.end()) bans = b->second;
  bans.insert(std::lower_bound(bans.begin(), bans.end(), banned_token), banned_token);
  const std::vector<int32_t>& always = seq.request.sampling.banned_ids;
  std::vector<int32_t> all;
  std::set_union(always.begin(), always.end(), bans.begin(), bans.end(), std::back_inserter(all));
  if (seq.request.vocab_size > 0 && static_cast<int64_t>(all.size()) >= seq.request.vocab_size) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", id, ": banning token ", banned_token,
                                                     " at output position ", output_tokens,
                                                     " would leave no token of the vocabulary"));
  }
  ++seq.rewinds;
  ++rewinds_;
  ++seq.epoch;  // its entry in a step in flight (pipeline) is void
  seq.bans.erase(seq.bans.upper_bound(output_tokens), seq.bans.end());
  seq.bans[output_tokens] = std::move(bans);
  seq.tokens.resize(static_cast<size_t>(seq.prompt_len + output_tokens));
  if (seq.running) rewind_pages(id, seq);
  return absl::OkStatus();
}

void Scheduler::rewind_pages(SeqId id, Sequence& seq) {
  const int32_t ps = config_.page_size;
  const int32_t w = std::min(seq.num_computed, seq.num_known() - 1);  // first position written again
  if (w == seq.num_computed) return;  // nothing computed from there on
  seq.num_computed = w;
  seq.chain.recorded = std::min(seq.chain.recorded, w);
  seq.chain.ids.resize(static_cast<size_t>(seq.chain.recorded / ps));
  seq.chain.hashes.resize(seq.chain.ids.size());
  // A page only this sequence references and the index does not know may be written as it is.
  auto is_private = [&](int32_t page) { return pages_.references(page) == 1 && !pages_.has_entry(page); };
  // Pages written from their first position on: keep the private ones up to the first that is
  // not; give that one and the rest back (cached ones keep their contents for other requests).
  size_t keep = static_cast<size_t>(w / ps + (w % ps != 0 ? 1 : 0));
  while (keep < seq.pages.size() && is_private(seq.pages[keep])) ++keep;
  if (keep < seq.pages.size()) {
    std::vector<int32_t> dropped(seq.pages.begin() + static_cast<std::ptrdiff_t>(keep), seq.pages.end());
    seq.pages.resize(keep);
    pages_.release(dropped);
  }
  drop_rewind_copies(id, /*only_stale=*/true);
  if (w % ps == 0 || is_private(seq.pages[w / ps])) return;
  // The page holding the rewind point keeps its first w % ps positions: a private copy.
  const size_t k = static_cast<size_t>(w / ps);
  const int32_t old = seq.pages[k];
  if (pages_.available() < 1) {
    requeue(id);
    ++preemptions_;
    return;
  }
  pages_.pin(old);
  std::vector<int32_t> fresh;
  EXL3_CHECK(pages_.allocate(1, fresh), "allocation of a page after the check");
  std::vector<int32_t> one{old};
  pages_.release(one);
  seq.pages[k] = fresh[0];
  rewind_copies_.push_back({id, PageCopy{old, fresh[0]}});
  ++rewind_page_copies_;
}

absl::Status Scheduler::finish(SeqId id, FinishReason reason) {
  if (seqs_.count(id) == 0) {
    return absl::NotFoundError(absl::StrCat("finish(", finish_reason_name(reason), "): no live sequence ", id));
  }
  end_sequence(id);
  ++completed_;
  return absl::OkStatus();
}

absl::Status Scheduler::cancel(SeqId id) {
  if (seqs_.count(id) == 0) return absl::NotFoundError(absl::StrCat("cancel: no live sequence ", id));
  end_sequence(id);
  ++cancelled_;
  return absl::OkStatus();
}

std::vector<SeqId> Scheduler::cancel_all() {
  std::vector<SeqId> ids;
  for (const auto& [id, seq] : seqs_) ids.push_back(id);
  for (const SeqId id : ids) EXL3_CHECK_OK(cancel(id));
  return ids;
}

std::vector<SeqId> Scheduler::take_released() {
  std::vector<SeqId> out = std::move(released_);
  released_.clear();
  return out;
}

std::optional<SequenceInfo> Scheduler::sequence_info(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  const Sequence& seq = it->second;
  SequenceInfo info;
  info.state = seq.running ? SequenceState::kRunning : SequenceState::kQueued;
  info.prompt_len = seq.prompt_len;
  info.num_generated = seq.num_known() - seq.prompt_len;
  info.num_computed = seq.num_computed;
  info.num_pages = static_cast<int32_t>(seq.pages.size());
  return info;
}

std::vector<int32_t> Scheduler::output_tokens(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return {};
  return std::vector<int32_t>(it->second.tokens.begin() + it->second.prompt_len, it->second.tokens.end());
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.queued = static_cast<int32_t>(queue_.size());
  s.running = static_cast<int32_t>(running_.size());
  s.free_pages = pages_.free_pages();
  s.total_pages = pages_.num_pages();
  s.cached_pages = pages_.cached_pages();
  s.shared_pages = pages_.shared_pages();
  s.steps = steps_;
  s.batch_size_counts = batch_size_counts_;
  s.largest_batch = largest_batch_;
  s.submitted = submitted_;
  s.completed = completed_;
  s.cancelled = cancelled_;
  s.preemptions = preemptions_;
  s.prompt_tokens = prompt_tokens_;
  s.generated_tokens = generated_tokens_;
  s.prompt_tokens_computed = prompt_tokens_computed_;
  s.prompt_tokens_reused = prompt_tokens_reused_;
  s.rewinds = rewinds_;
  s.rewind_page_copies = rewind_page_copies_;
  return s;
}

absl::Status Scheduler::check_invariants() const {
  auto broken = [](auto&&... parts) { return absl::InternalError(absl::StrCat("scheduler invariant: ", parts...)); };
  const int32_t ps = config_.page_size;
  std::vector<int32_t> holders(config_.num_pages, 0);
  // The first holder of each page and the logical index it holds it at.
  std::vector<std::pair<SeqId, int32_t>> first_holder(config_.num_pages, {0, -1});
  if (queue_.size() + running_.size() != seqs_.size()) {
    return broken(queue_.size(), " queued + ", running_.size(), " running != ", seqs_.size(), " live");
  }
  if (static_cast<int32_t>(running_.size()) > config_.max_batch) {
    return broken(running_.size(), " running > max_batch ", config_.max_batch);
  }
  for (const auto& [id, seq] : seqs_) {
    if (seq.running != (running_.count(id) != 0) || seq.running == (queue_.count(id) != 0)) {
      return broken("sequence ", id, " is not in exactly one of queue and running set");
    }
    if (seq.num_known() >= seq.token_limit() || seq.num_computed >= seq.num_known() || seq.num_computed < 0) {
      return broken("sequence ", id, ": ", seq.num_known(), " tokens, ", seq.num_computed, " computed, limit ",
                    seq.token_limit());
    }
    if (seq.rewinds > kMaxRewinds) return broken("sequence ", id, " rewound ", seq.rewinds, " times");
    for (const auto& [position, banned] : seq.bans) {
      if (position < 0 || position > seq.num_known() - seq.prompt_len || banned.empty() ||
          std::adjacent_find(banned.begin(), banned.end(), std::greater_equal<int32_t>()) != banned.end()) {
        return broken("sequence ", id, ": bans at output position ", position, " of ",
                      seq.num_known() - seq.prompt_len);
      }
    }
    if (!seq.running) {
      if (!seq.pages.empty() || seq.num_computed != 0 || !seq.chain.ids.empty()) {
        return broken("queued sequence ", id, " holds ", seq.pages.size(), " pages, ", seq.num_computed,
                      " computed positions");
      }
      continue;
    }
    const int64_t capacity = static_cast<int64_t>(seq.pages.size()) * ps;
    if (capacity < seq.num_computed) {
      return broken("sequence ", id, ": ", seq.num_computed, " computed positions over ", seq.pages.size(), " pages");
    }
    if (static_cast<int32_t>(seq.pages.size()) > pages_for(seq.token_limit() - 1, ps)) {
      return broken("sequence ", id, " holds ", seq.pages.size(), " pages, more than its last position needs");
    }
    if (seq.chain.recorded > seq.num_computed) {
      return broken("sequence ", id, ": ", seq.chain.recorded, " positions indexed, ", seq.num_computed, " computed");
    }
    for (size_t k = 0; k < seq.pages.size(); ++k) {
      const int32_t page = seq.pages[k];
      const int32_t logical = static_cast<int32_t>(k);
      if (page < 0 || page >= config_.num_pages) return broken("sequence ", id, " holds page ", page);
      const auto [other, other_logical] = first_holder[page];
      if (other == id) return broken("sequence ", id, " holds page ", page, " twice");
      // A page held by several sequences is shared read-only: full, and before every holder's
      // first position to compute, at the same logical index.
      if (holders[page]++ > 0) {
        const Sequence& o = seqs_.at(other);
        const int32_t end = (logical + 1) * ps;
        if (other_logical != logical || seq.num_computed < end || o.num_computed < end) {
          return broken("page ", page, " is held by sequences ", other, " and ", id, " where one may write it");
        }
      } else {
        first_holder[page] = {id, logical};
      }
      const std::span<const int32_t> cached = pages_.entry_tokens(page);
      if (!cached.empty()) {
        const int32_t begin = logical * ps;
        if (begin + static_cast<int32_t>(cached.size()) > seq.num_computed ||
            !std::equal(cached.begin(), cached.end(), seq.tokens.begin() + begin)) {
          return broken("page ", page, " is indexed with tokens sequence ", id, " has not computed there");
        }
      }
    }
  }
  if (const absl::Status s = pages_.check(holders); !s.ok()) return broken(s.message());
  for (const auto& [id, copy] : rewind_copies_) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second.running) return broken("rewind copy of sequence ", id, " that does not run");
    const std::vector<int32_t>& pages = it->second.pages;
    if (std::find(pages.begin(), pages.end(), copy.dst) == pages.end() || pages_.references(copy.dst) != 1 ||
        pages_.has_entry(copy.dst) || copy.src == copy.dst || pages_.references(copy.src) < 1 ||
        std::find(pages.begin(), pages.end(), copy.src) != pages.end()) {
      return broken("rewind copy ", copy.src, " -> ", copy.dst, " of sequence ", id,
                    " is not from a held page into one of its private pages");
    }
  }
  return absl::OkStatus();
}

}  // namespace exl3
