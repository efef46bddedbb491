// The step thread: scheduling, worker round trips, streaming and stop conditions.
#include "coordinator/server/serving_loop.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "worker/service/proto_convert.h"

namespace exl3 {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

pb::Command step_command(const StepPlan& plan, bool speculative) {
  pb::Command cmd;
  pb::Step* step = cmd.mutable_step();
  step->set_step_id(plan.step_id);
  step->set_decode_steps(plan.decode_steps);
  step->set_speculative(speculative && plan.decode_steps > 1);
  for (const PageCopy& c : plan.page_copies) {
    pb::PageCopy* copy = step->add_page_copies();
    copy->set_src(c.src);
    copy->set_dst(c.dst);
  }
  for (const SequencePlan& s : plan.sequences) {
    pb::SequenceStep* q = step->add_sequences();
    q->set_seq_id(s.seq_id);
    q->mutable_tokens()->Add(s.tokens.begin(), s.tokens.end());
    q->set_from_last_sample(s.from_last_sample);
    q->set_start_pos(s.start_pos);
    q->mutable_page_table()->Add(s.page_table.begin(), s.page_table.end());
    q->set_sample(s.sample);
    *q->mutable_sampling() = sampling_to_proto(s.sampling);
    // DRY's breaker ids travel with prefill chunks only; the worker keeps them (worker.proto).
    if (s.start_pos >= s.prompt_len) q->mutable_sampling()->clear_dry_breakers();
    q->set_prompt_len(s.prompt_len);
    q->mutable_history_prefix()->Add(s.history_prefix.begin(), s.history_prefix.end());
    q->mutable_banned_now()->Add(s.banned_now.begin(), s.banned_now.end());
  }
  return cmd;
}

}  // namespace

ServingLoop::ServingLoop(const Tokenizer& tokenizer, std::shared_ptr<WorkerGroup> group, const SchedulerConfig& config,
                         std::chrono::milliseconds step_timeout, FailureCallback on_failure)
    : tokenizer_(tokenizer),
      group_(std::move(group)),
      step_timeout_(step_timeout),
      on_failure_(std::move(on_failure)),
      scheduler_(config) {}

ServingLoop::~ServingLoop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void ServingLoop::start() { thread_ = std::thread([this] { run(); }); }

absl::StatusOr<ServingLoop::Submitted> ServingLoop::submit(ValidatedRequest request) {
  std::lock_guard lock(mu_);
  if (!accepting_) return absl::UnavailableError("the server is shutting down or its workers failed");
  Live live;
  live.channel = std::make_shared<RequestChannel>();
  live.detokenizer = std::make_unique<StreamingDetokenizer>(tokenizer_, request.skip_special_tokens);
  live.skip_special_tokens = request.skip_special_tokens;
  live.banned = std::make_unique<BannedStringFilter>(request.banned_strings);
  live.stops = std::make_unique<StopStringFilter>(request.stop_strings);
  live.arrival = Clock::now();
  live.prompt_tokens = static_cast<int32_t>(request.prompt_ids.size());
  EXL3_ASSIGN_OR_RETURN(const SeqId id, scheduler_.submit(std::move(request)));
  Submitted out{id, live.channel};
  live_.emplace(id, std::move(live));
  cv_.notify_all();
  return out;
}

void ServingLoop::cancel(SeqId id) {
  std::lock_guard lock(mu_);
  if (scheduler_.cancel(id).ok()) {
    auto it = live_.find(id);
    if (it != live_.end()) {
      it->second.channel->fail(absl::CancelledError("cancelled by the client"));
      live_.erase(it);
    }
    cv_.notify_all();
  }
}

ServingTotals ServingLoop::totals() {
  std::lock_guard lock(mu_);
  ServingTotals t;
  t.scheduler = scheduler_.stats();
  const auto now = Clock::now();
  t.uptime_s = seconds(now - started_);
  int64_t recent = 0;
  for (const auto& [when, n] : recent_) {
    if (now - when < std::chrono::seconds(10)) recent += n;
  }
  t.recent_tokens_per_s = recent / std::min(10.0, std::max(t.uptime_s, 1e-3));
  t.mean_tokens_per_s = busy_seconds_ > 0 ? t.scheduler.generated_tokens / busy_seconds_ : 0.0;
  t.speculation = speculation_;
  return t;
}

void ServingLoop::drain_and_stop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  accepting_ = false;
  cv_.wait_for(lock, timeout, [&] { return live_.empty() || stop_; });
  stop_ = true;
  cv_.notify_all();
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  fail_all(absl::UnavailableError("the server stopped before the request finished"));
}

void ServingLoop::fail_all(const absl::Status& status) {
  std::lock_guard lock(mu_);
  accepting_ = false;
  while (scheduler_.step_in_flight()) scheduler_.abandon_step();
  scheduler_.cancel_all();
  for (auto& [id, live] : live_) live.channel->fail(status);
  live_.clear();
  cv_.notify_all();
}

absl::Status ServingLoop::collect_step(const SentStep& sent, StepOutcome* outcome) {
  if (sent.release) EXL3_RETURN_IF_ERROR(group_->collect(*sent.release, step_timeout_).status());
  EXL3_ASSIGN_OR_RETURN(const std::vector<pb::CommandResult> results, group_->collect(sent.step, step_timeout_));
  const StepPlan& plan = sent.plan;
  // Every rank samples the same tokens; disagreement means the group is broken.
  const pb::StepResult& first = results[0].step();
  for (size_t r = 1; r < results.size(); ++r) {
    const pb::StepResult& other = results[r].step();
    bool same = other.sequences_size() == first.sequences_size();
    for (int i = 0; same && i < first.sequences_size(); ++i) {
      same = other.sequences(i).seq_id() == first.sequences(i).seq_id() &&
             std::equal(other.sequences(i).token_ids().begin(), other.sequences(i).token_ids().end(),
                        first.sequences(i).token_ids().begin(), first.sequences(i).token_ids().end());
    }
    if (!same) return absl::InternalError(absl::StrCat("rank ", r, " sampled different tokens than rank 0"));
  }
  outcome->step_id = plan.step_id;
  for (const auto& s : first.sequences()) {
    outcome->sequences.push_back({s.seq_id(), {s.token_ids().begin(), s.token_ids().end()}});
  }
  // Logprobs come from the ranks that compute the head (any one of them).
  step_logprobs_.clear();
  for (const pb::CommandResult& r : results) {
    for (const auto& s : r.step().sequences()) {
      if (s.logprobs_size() > 0 && !step_logprobs_.contains(s.seq_id())) step_logprobs_[s.seq_id()] = logprobs_from_proto(s);
    }
  }
  return absl::OkStatus();
}

void ServingLoop::count_speculation(const StepPlan& plan, const StepOutcome& outcome) {
  if (!scheduler_.config().speculative || plan.decode_steps < 2) return;
  for (const SequencePlan& s : plan.sequences) {
    if (!s.sample || s.tokens.size() != 1 || !s.banned_now.empty()) continue;  // drafted (Engine: speculates())
    for (const SequenceResult& r : outcome.sequences) {
      if (r.seq_id != s.seq_id || r.token_ids.empty()) continue;
      ++speculation_.rounds;
      speculation_.proposed += plan.decode_steps - 1;
      speculation_.accepted += static_cast<int64_t>(r.token_ids.size()) - 1;
    }
  }
}

void ServingLoop::end_live(SeqId id, FinishReason reason) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = it->second;
  const std::string rest = live.detokenizer->flush();
  const std::string tail = live.stops->append(rest).emit + live.stops->flush();
  if (!tail.empty()) live.channel->push(tail, {});
  const auto now = Clock::now();
  GenerationUsage usage;
  usage.prompt_tokens = live.prompt_tokens;
  usage.completion_tokens = live.completion_tokens;
  usage.time_to_first_token_s = seconds(live.first_token - live.arrival);
  usage.total_time_s = seconds(now - live.arrival);
  const double decode_time = seconds(now - live.first_token);
  usage.decode_tokens_per_s = live.completion_tokens > 1 && decode_time > 0 ? (live.completion_tokens - 1) / decode_time : 0;
  live.channel->finish(reason, usage);
  live_.erase(it);
}

void ServingLoop::apply_updates(const std::vector<SequenceUpdate>& updates) {
  const auto now = Clock::now();
  int64_t generated = 0;
  for (const SequenceUpdate& u : updates) {
    auto it = live_.find(u.seq_id);
    if (it == live_.end()) continue;
    Live& live = it->second;
    if (!live.sampled && !u.new_tokens.empty()) {
      live.first_token = now;
      live.sampled = true;
    }
    generated += static_cast<int64_t>(u.new_tokens.size());
    const std::vector<TokenLogprobs>* logprobs = nullptr;
    if (auto lp = step_logprobs_.find(u.seq_id); lp != step_logprobs_.end() && lp->second.size() >= u.new_tokens.size()) {
      logprobs = &lp->second;
    }
    for (size_t i = 0; i < u.new_tokens.size(); ++i) {
      const std::string text = live.detokenizer->push(u.new_tokens[i]);
      live.banned->push(u.new_tokens[i], text, live.detokenizer->pending_bytes() > 0,
                        logprobs != nullptr ? std::optional<TokenLogprobs>((*logprobs)[i]) : std::nullopt);
    }
    std::optional<FinishReason> finish = u.finish_reason;
    if (finish) live.banned->push_tail(live.detokenizer->flush());
    BannedStringFilter::Release release;
    if (const std::optional<BannedStringFilter::Match> match = live.banned->find()) {
      if (finish) {
        // Finished in this step (EOS, stop token, length): too late to rewind.
        release = live.banned->cut(*match);
      } else if (rewind_banned(u.seq_id, live, *match)) {
        release = live.banned->take_safe();
      } else {
        (void)scheduler_.finish(u.seq_id, FinishReason::kStopString);
        finish = FinishReason::kStopString;
        release = live.banned->cut(*match);
      }
    } else {
      release = finish ? live.banned->take_all() : live.banned->take_safe();
    }
    deliver(u.seq_id, live, std::move(release), finish);
  }
  recent_.push_back({now, generated});
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10)) recent_.erase(recent_.begin());
}

bool ServingLoop::rewind_banned(SeqId id, Live& live, const BannedStringFilter::Match& match) {
  const std::vector<int32_t> output = scheduler_.output_tokens(id);
  if (static_cast<int32_t>(output.size()) != live.banned->num_tokens() ||
      match.token_index >= static_cast<int32_t>(output.size())) {
    std::fprintf(stderr, "coordinator: sequence %llu: banned string at token %d of %d, the scheduler holds %zu\n",
                 static_cast<unsigned long long>(id), match.token_index, live.banned->num_tokens(), output.size());
    return false;
  }
  const absl::Status status = scheduler_.rewind(id, match.token_index, output[match.token_index]);
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kResourceExhausted) {
      std::fprintf(stderr, "coordinator: sequence %llu: rewind refused: %s\n", static_cast<unsigned long long>(id),
                   std::string(status.message()).c_str());
    }
    return false;
  }
  live.banned->rewind(match.token_index);
  // The detokenizer's state after the kept tokens: the last of them completed its text (see
  // BannedStringFilter::find), so replaying them gives exactly the kept text.
  live.detokenizer = std::make_unique<StreamingDetokenizer>(tokenizer_, live.skip_special_tokens);
  std::string replayed;
  for (int32_t i = 0; i < match.token_index; ++i) replayed += live.detokenizer->push(output[i]);
  EXL3_CHECK(replayed == live.banned->text() && live.detokenizer->pending_bytes() == 0, "sequence ", id,
             ": replaying ", match.token_index, " tokens does not give the kept text");
  return true;
}

void ServingLoop::deliver(SeqId id, Live& live, BannedStringFilter::Release release,
                          std::optional<FinishReason> finish) {
  live.completion_tokens += static_cast<int32_t>(release.tokens.size());
  const StopStringFilter::Result r = live.stops->append(release.text);
  if (!r.emit.empty() || !release.tokens.empty()) live.channel->push(r.emit, release.tokens, release.logprobs);
  if (r.stopped) {
    (void)scheduler_.finish(id, FinishReason::kStopString);
    end_live(id, FinishReason::kStopString);
  } else if (finish) {
    end_live(id, *finish);
  }
}

void ServingLoop::group_failed(const absl::Status& status) {
  const absl::Status client_status =
      absl::UnavailableError(absl::StrCat("worker group failed: ", std::string(status.message())));
  fail_all(client_status);
  if (on_failure_) on_failure_(status);
}

bool ServingLoop::send_step(StepPlan plan) {
  SentStep sent;
  absl::Status status;
  if (!plan.released.empty()) {
    pb::Command release;
    release.mutable_release()->mutable_seq_ids()->Add(plan.released.begin(), plan.released.end());
    absl::StatusOr<uint64_t> id = group_->send_all(release, step_timeout_);
    if (id.ok()) sent.release = *id;
    status = id.status();
  }
  if (status.ok()) {
    absl::StatusOr<uint64_t> id = group_->send_all(step_command(plan, scheduler_.config().speculative), step_timeout_);
    if (id.ok()) sent.step = *id;
    status = id.status();
  }
  bool ping = status.ok();
  for (const SentStep& s : sent_) ping = ping && !s.ping.has_value();
  if (ping) {
    std::lock_guard lock(mu_);
    ping = worker_memory_.empty() || Clock::now() - memory_at_ >= kMemoryRefresh;
  }
  if (ping) {
    pb::Command command;
    command.mutable_ping();
    absl::StatusOr<uint64_t> id = group_->send_all(command, step_timeout_);
    if (id.ok()) sent.ping = *id;
    status = id.status();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "coordinator: sending step %llu failed: %s\n", static_cast<unsigned long long>(plan.step_id),
                 std::string(status.message()).c_str());
    group_failed(status);
    return false;
  }
  sent.plan = std::move(plan);
  sent.sent_at = Clock::now();
  sent_.push_back(std::move(sent));
  return true;
}

bool ServingLoop::complete_oldest() {
  const SentStep sent = std::move(sent_.front());
  sent_.pop_front();
  StepOutcome outcome;
  const absl::Status status = collect_step(sent, &outcome);
  if (!status.ok()) {
    std::fprintf(stderr, "coordinator: step %llu failed: %s\n", static_cast<unsigned long long>(sent.plan.step_id),
                 std::string(status.message()).c_str());
    group_failed(status);
    return false;
  }
  if (sent.ping) {
    const absl::StatusOr<std::vector<pb::CommandResult>> pings = group_->collect(*sent.ping, step_timeout_);
    if (!pings.ok()) {
      std::fprintf(stderr, "coordinator: memory ping failed: %s\n", std::string(pings.status().message()).c_str());
      group_failed(pings.status());
      return false;
    }
    std::lock_guard lock(mu_);
    worker_memory_.clear();
    for (const pb::CommandResult& r : *pings) worker_memory_.push_back(r.memory());
    memory_at_ = Clock::now();
  }
  const StepPlan& plan = sent.plan;
  {
    std::lock_guard lock(mu_);
    // Busy time: steps overlap when pipelined, so count from the later of its sending and the
    // previous completion.
    const auto now = Clock::now();
    busy_seconds_ += seconds(now - std::max(sent.sent_at, last_completion_));
    last_completion_ = now;
    count_speculation(plan, outcome);
    absl::StatusOr<std::vector<SequenceUpdate>> updates = scheduler_.complete_step(outcome);
    if (!updates.ok()) {
      scheduler_.abandon_step();
      std::fprintf(stderr, "coordinator: step %llu result rejected: %s\n",
                   static_cast<unsigned long long>(plan.step_id), std::string(updates.status().message()).c_str());
      fail_step(plan, absl::InternalError(absl::StrCat("step ", plan.step_id, " result rejected: ",
                                                       updates.status().message())));
    } else {
      apply_updates(*updates);
    }
    cv_.notify_all();
  }
  return true;
}

void ServingLoop::run() {
  const size_t depth = static_cast<size_t>(max_steps_in_flight(scheduler_.config()));
  while (true) {
    std::optional<StepPlan> plan;
    {
      std::unique_lock lock(mu_);
      if (sent_.empty()) {
        cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_ || !scheduler_.idle(); });
      }
      if (stop_) return;
      if (sent_.empty() && scheduler_.idle()) {
        lock.unlock();
        if (!refresh_worker_memory()) return;
        continue;
      }
      // With a step in flight (pipeline) the next one is planned and sent before waiting for it.
      if (sent_.size() < depth) plan = scheduler_.next_step();
      if (!plan && sent_.empty()) {
        const std::vector<SeqId> released = scheduler_.take_released();
        if (released.empty()) {
          // Nothing can run right now (e.g. requests arriving mid-cancel): do not spin.
          cv_.wait_for(lock, std::chrono::milliseconds(5));
          continue;
        }
        lock.unlock();
        pb::Command release;
        release.mutable_release()->mutable_seq_ids()->Add(released.begin(), released.end());
        const absl::Status s = group_->call_all(release, step_timeout_).status();
        if (!s.ok()) {
          fail_all(s);
          if (on_failure_) on_failure_(s);
          return;
        }
        continue;
      }
    }
    if (plan) {
      if (!send_step(std::move(*plan))) return;
      if (sent_.size() < depth) continue;
    }
    if (!complete_oldest()) return;
    if (sent_.empty() && !refresh_worker_memory()) return;
  }
}

void ServingLoop::fail_step(const StepPlan& plan, const absl::Status& status) {
  for (const SequencePlan& s : plan.sequences) {
    (void)scheduler_.cancel(s.seq_id);  // frees its pages; the release reaches the workers next step
    auto it = live_.find(s.seq_id);
    if (it == live_.end()) continue;
    it->second.channel->fail(status);
    live_.erase(it);
  }
}

bool ServingLoop::refresh_worker_memory() {
  {
    std::lock_guard lock(mu_);
    if (!worker_memory_.empty() && Clock::now() - memory_at_ < kMemoryRefresh) return true;
  }
  pb::Command ping;
  ping.mutable_ping();
  const absl::StatusOr<std::vector<pb::CommandResult>> results = group_->call_all(ping, step_timeout_);
  if (!results.ok()) {
    fail_all(absl::UnavailableError(absl::StrCat("worker group failed: ", results.status().message())));
    if (on_failure_) on_failure_(results.status());
    return false;
  }
  std::lock_guard lock(mu_);
  worker_memory_.clear();
  for (const pb::CommandResult& r : *results) worker_memory_.push_back(r.memory());
  memory_at_ = Clock::now();
  return true;
}

ServingLoop::WorkerMemory ServingLoop::worker_memory() {
  std::lock_guard lock(mu_);
  WorkerMemory m;
  m.reports = worker_memory_;
  m.age_s = worker_memory_.empty() ? 0.0 : seconds(Clock::now() - memory_at_);
  return m;
}

}  // namespace exl3
