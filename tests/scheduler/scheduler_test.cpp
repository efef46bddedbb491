// Behaviour tests of the Scheduler: admission order, batching, chunked prefill, page accounting,
// refusals, stop conditions, multi-step decode reservations, preemption and step bookkeeping.
#include "coordinator/scheduler/scheduler.h"

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace exl3 {
namespace {

constexpr int32_t kEos = 2;

struct RequestSpec {
  int32_t prompt_len = 4;
  std::optional<int32_t> max_new_tokens;
  int32_t max_context = 4096;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
};

// Prompt ids 10, 11, 12, ... through validate_request, as the service would build them.
ValidatedRequest make_request(const RequestSpec& spec) {
  GenerateParams params;
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < spec.prompt_len; ++i) ids.push_back(10 + i % 900);
  params.prompt = ids;
  params.stopping.max_new_tokens = spec.max_new_tokens;
  params.stopping.stop_token_ids = spec.stop_token_ids;
  params.stopping.ignore_eos = spec.ignore_eos;
  auto r = validate_request(params, ModelLimits{1000, spec.max_context, {kEos}}, ids, 7);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

ValidatedRequest make_request(int32_t prompt_len, std::optional<int32_t> max_new_tokens) {
  RequestSpec spec;
  spec.prompt_len = prompt_len;
  spec.max_new_tokens = max_new_tokens;
  return make_request(spec);
}

SchedulerConfig config(int32_t num_pages, int32_t page_size, int32_t max_batch = 8) {
  SchedulerConfig c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.max_batch = max_batch;
  c.max_step_tokens = 256;
  c.prefill_chunk = 64;
  c.max_queue = 16;
  c.decode_steps = 1;
  c.prefix_cache = false;  // these tests count pages without reuse; prefix_cache_test.cpp covers it
  return c;
}

SeqId submit(Scheduler& s, const ValidatedRequest& r) {
  auto id = s.submit(r);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : 0;
}

// Token the fake worker samples for `seq` at `position` (never EOS unless a test says so).
using TokenFn = std::function<int32_t(SeqId seq, int32_t position)>;
int32_t plain_token(SeqId seq, int32_t position) { return 100 + static_cast<int32_t>(seq) * 10 + position % 7; }

// What the workers would report: decode_steps tokens for every sampling sequence.
StepOutcome respond(const StepPlan& plan, const TokenFn& token = plain_token) {
  StepOutcome outcome;
  outcome.step_id = plan.step_id;
  for (const SequencePlan& seq : plan.sequences) {
    if (!seq.sample) continue;
    SequenceResult result{seq.seq_id, {}};
    const int32_t first = seq.start_pos + static_cast<int32_t>(seq.tokens.size());
    for (int32_t i = 0; i < plan.decode_steps; ++i) result.token_ids.push_back(token(seq.seq_id, first + i));
    outcome.sequences.push_back(result);
  }
  return outcome;
}

void expect_plan_well_formed(const StepPlan& plan, const SchedulerConfig& c) {
  EXPECT_GE(plan.decode_steps, 1);
  EXPECT_LE(plan.decode_steps, c.decode_steps);
  EXPECT_GE(plan.sequences.size(), 1u);
  EXPECT_LE(static_cast<int32_t>(plan.sequences.size()), c.max_batch);
  std::set<int32_t> pages;
  std::set<SeqId> ids;
  int32_t tokens = 0;
  for (const SequencePlan& seq : plan.sequences) {
    EXPECT_TRUE(ids.insert(seq.seq_id).second) << "sequence " << seq.seq_id << " twice";
    const int32_t len = static_cast<int32_t>(seq.tokens.size());
    tokens += len;
    EXPECT_GE(len, 1);
    if (len > 1) {
      EXPECT_LE(len, c.prefill_chunk);
    }
    const int64_t covered = static_cast<int64_t>(seq.page_table.size()) * c.page_size;
    EXPECT_GE(covered, seq.start_pos + len + (seq.sample ? plan.decode_steps - 1 : 0))
        << "sequence " << seq.seq_id << " at " << seq.start_pos;
    for (const int32_t page : seq.page_table) EXPECT_TRUE(pages.insert(page).second) << "page " << page << " shared";
  }
  EXPECT_LE(tokens, c.max_step_tokens);
}

struct StepRun {
  StepPlan plan;
  std::vector<SequenceUpdate> updates;
};

// One step end to end, with the invariants checked on both sides of it.
std::optional<StepRun> run_step(Scheduler& s, const TokenFn& token = plain_token) {
  std::optional<StepPlan> plan = s.next_step();
  EXPECT_TRUE(s.check_invariants().ok()) << s.check_invariants();
  if (!plan.has_value()) return std::nullopt;
  expect_plan_well_formed(*plan, s.config());
  auto updates = s.complete_step(respond(*plan, token));
  EXPECT_TRUE(updates.ok()) << updates.status();
  EXPECT_TRUE(s.check_invariants().ok()) << s.check_invariants();
  return StepRun{std::move(*plan), updates.ok() ? std::move(*updates) : std::vector<SequenceUpdate>{}};
}

std::vector<SeqId> ids_in(const StepPlan& plan) {
  std::vector<SeqId> ids;
  for (const SequencePlan& seq : plan.sequences) ids.push_back(seq.seq_id);
  return ids;
}

const SequencePlan* find_seq(const StepPlan& plan, SeqId id) {
  for (const SequencePlan& seq : plan.sequences) {
    if (seq.seq_id == id) return &seq;
  }
  return nullptr;
}

// Runs steps until the scheduler is idle; returns each sequence's finish reason.
std::map<SeqId, FinishReason> run_to_end(Scheduler& s, const TokenFn& token = plain_token, int max_steps = 10000) {
  std::map<SeqId, FinishReason> reasons;
  for (int i = 0; i < max_steps && !s.idle(); ++i) {
    auto run = run_step(s, token);
    if (!run.has_value()) break;
    for (const SequenceUpdate& u : run->updates) {
      if (u.finish_reason.has_value()) reasons[u.seq_id] = *u.finish_reason;
    }
  }
  EXPECT_TRUE(s.idle());
  return reasons;
}

TEST(SchedulerConfig, RefusesBadValues) {
  EXPECT_TRUE(validate_scheduler_config(config(8, 16)).ok());
  SchedulerConfig c = config(8, 16);
  c.num_pages = 0;
  EXPECT_NE(validate_scheduler_config(c).message().find("num_pages"), std::string::npos);
  c = config(8, 16);
  c.decode_steps = 0;
  EXPECT_NE(validate_scheduler_config(c).message().find("decode_steps"), std::string::npos);
  c = config(8, 16);
  c.max_step_tokens = 4;
  c.max_batch = 8;
  const absl::Status status = validate_scheduler_config(c);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("max_step_tokens"), std::string::npos) << status;
}

TEST(Scheduler, AdmitsInArrivalOrder) {
  Scheduler s(config(64, 16, /*max_batch=*/2));
  const SeqId a = submit(s, make_request(4, 5));
  const SeqId b = submit(s, make_request(4, 5));
  const SeqId c = submit(s, make_request(4, 5));
  EXPECT_EQ(s.stats().queued, 3);

  auto run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(ids_in(run->plan), (std::vector<SeqId>{a, b}));
  EXPECT_EQ(s.stats().queued, 1);
  EXPECT_EQ(s.stats().running, 2);
  EXPECT_EQ(s.sequence_info(c)->state, SequenceState::kQueued);

  ASSERT_TRUE(s.cancel(a).ok());
  run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(ids_in(run->plan), (std::vector<SeqId>{b, c}));
  EXPECT_EQ(run->plan.released, (std::vector<SeqId>{a}));
}

TEST(Scheduler, HeadOfQueueIsNotOvertakenBySmallerRequests) {
  // 8 pages of 4 positions. a reserves 6 pages (20 prompt + 1), b needs 4, c only 1.
  Scheduler s(config(8, 4));
  const SeqId a = submit(s, make_request(20, 4));
  const SeqId b = submit(s, make_request(12, 2));
  const SeqId c = submit(s, make_request(1, 2));
  auto run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(ids_in(run->plan), (std::vector<SeqId>{a}));
  EXPECT_EQ(s.stats().free_pages, 2);
  EXPECT_EQ(s.sequence_info(c)->state, SequenceState::kQueued);
  while (s.sequence_info(a).has_value()) ASSERT_TRUE(run_step(s).has_value());
  run = run_step(s);
  ASSERT_TRUE(run.has_value());
  // Both admitted together; c's single prompt token runs first, as decodes do.
  EXPECT_EQ(ids_in(run->plan), (std::vector<SeqId>{c, b}));
}

TEST(Scheduler, BatchesConcurrentRequests) {
  Scheduler s(config(64, 16));
  std::vector<SeqId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(submit(s, make_request(6, 5)));
  const auto reasons = run_to_end(s);
  ASSERT_EQ(reasons.size(), 4u);
  for (const SeqId id : ids) EXPECT_EQ(reasons.at(id), FinishReason::kLength);
  const SchedulerStats stats = s.stats();
  EXPECT_EQ(stats.steps, 5);  // one prefill step that samples the first token, then four decodes
  EXPECT_EQ(stats.batch_size_counts[4], 5);
  EXPECT_EQ(stats.largest_batch, 4);
  EXPECT_EQ(stats.completed, 4);
  EXPECT_EQ(stats.generated_tokens, 20);
  EXPECT_EQ(stats.prompt_tokens, 24);
}

TEST(Scheduler, ChunksALongPromptWhileOthersDecode) {
  SchedulerConfig c = config(64, 16);
  c.max_step_tokens = 12;
  c.prefill_chunk = 8;
  Scheduler s(c);
  const SeqId a = submit(s, make_request(3, 20));
  auto run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_TRUE(run->plan.sequences[0].sample);

  const ValidatedRequest long_request = make_request(30, 4);
  const SeqId b = submit(s, long_request);
  const std::vector<std::pair<int32_t, int32_t>> chunks = {{0, 8}, {8, 8}, {16, 8}, {24, 6}};
  for (const auto& [start, len] : chunks) {
    run = run_step(s);
    ASSERT_TRUE(run.has_value());
    ASSERT_EQ(ids_in(run->plan), (std::vector<SeqId>{a, b}));
    const SequencePlan& decode = run->plan.sequences[0];
    EXPECT_EQ(decode.tokens.size(), 1u);
    EXPECT_TRUE(decode.sample);
    const SequencePlan& prefill = run->plan.sequences[1];
    EXPECT_EQ(prefill.start_pos, start);
    EXPECT_EQ(prefill.prompt_len, 30);
    EXPECT_EQ(prefill.tokens, std::vector<int32_t>(long_request.prompt_ids.begin() + start,
                                                   long_request.prompt_ids.begin() + start + len));
    EXPECT_EQ(prefill.sample, start + len == 30);
    // Only the last chunk reports a token.
    ASSERT_EQ(run->updates.size(), prefill.sample ? 2u : 1u);
  }
  EXPECT_EQ(s.sequence_info(b)->num_generated, 1);
  EXPECT_EQ(s.sequence_info(b)->num_computed, 30);
  EXPECT_EQ(s.sequence_info(a)->num_generated, 5);
}

TEST(Scheduler, PrefillsShareTheTokenBudget) {
  SchedulerConfig c = config(64, 16);
  c.max_step_tokens = 12;
  c.prefill_chunk = 8;
  Scheduler s(c);
  const SeqId a = submit(s, make_request(10, 3));
  const SeqId b = submit(s, make_request(10, 3));
  auto run = run_step(s);
  ASSERT_TRUE(run.has_value());
  ASSERT_EQ(ids_in(run->plan), (std::vector<SeqId>{a, b}));
  EXPECT_EQ(run->plan.sequences[0].tokens.size(), 8u);
  EXPECT_EQ(run->plan.sequences[1].tokens.size(), 4u);
  run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->plan.sequences[0].start_pos, 8);
  EXPECT_EQ(run->plan.sequences[0].tokens.size(), 2u);
  EXPECT_EQ(run->plan.sequences[1].start_pos, 4);
  EXPECT_EQ(run->plan.sequences[1].tokens.size(), 6u);
  EXPECT_TRUE(run->plan.sequences[0].sample);
  EXPECT_TRUE(run->plan.sequences[1].sample);
}

TEST(Scheduler, FinishAndCancelReturnPagesAtOnce) {
  SchedulerConfig c = config(32, 4, /*max_batch=*/3);
  c.max_step_tokens = 16;
  c.prefill_chunk = 8;
  Scheduler s(c);
  const SeqId decoding = submit(s, make_request(3, 30));
  ASSERT_TRUE(run_step(s).has_value());
  const SeqId prefilling = submit(s, make_request(40, 4));
  ASSERT_TRUE(run_step(s).has_value());
  EXPECT_EQ(s.sequence_info(prefilling)->num_computed, 8);
  const SeqId finishing = submit(s, make_request(4, 10));
  const SeqId queued = submit(s, make_request(4, 10));  // max_batch 3: stays queued
  ASSERT_TRUE(run_step(s).has_value());
  ASSERT_EQ(s.sequence_info(prefilling)->state, SequenceState::kRunning);
  ASSERT_EQ(s.sequence_info(finishing)->num_generated, 1);
  ASSERT_EQ(s.sequence_info(queued)->state, SequenceState::kQueued);
  const int32_t before = s.stats().free_pages;

  const int32_t prefill_pages = s.sequence_info(prefilling)->num_pages;
  ASSERT_TRUE(s.cancel(prefilling).ok());
  EXPECT_EQ(s.stats().free_pages, before + prefill_pages);
  const int32_t decode_pages = s.sequence_info(decoding)->num_pages;
  ASSERT_TRUE(s.cancel(decoding).ok());
  EXPECT_EQ(s.stats().free_pages, before + prefill_pages + decode_pages);
  ASSERT_TRUE(s.finish(finishing, FinishReason::kStopString).ok());
  ASSERT_TRUE(s.cancel(queued).ok());
  EXPECT_TRUE(s.check_invariants().ok()) << s.check_invariants();
  EXPECT_EQ(s.stats().free_pages, 32);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.stats().cancelled, 3);
  EXPECT_EQ(s.stats().completed, 1);

  EXPECT_EQ(s.cancel(queued).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.finish(12345, FinishReason::kStopString).code(), absl::StatusCode::kNotFound);
  // The queued one never reached a worker, so it needs no release.
  EXPECT_EQ(s.take_released(), (std::vector<SeqId>{prefilling, decoding, finishing}));
  EXPECT_FALSE(s.next_step().has_value());
}

TEST(Scheduler, CancelDuringAStepDropsItsTokens) {
  Scheduler s(config(32, 4));
  const SeqId a = submit(s, make_request(4, 10));
  const SeqId b = submit(s, make_request(4, 10));
  std::optional<StepPlan> plan = s.next_step();
  ASSERT_TRUE(plan.has_value());
  ASSERT_TRUE(s.cancel(a).ok());
  EXPECT_TRUE(s.step_in_flight());
  auto updates = s.complete_step(respond(*plan));
  ASSERT_TRUE(updates.ok()) << updates.status();
  ASSERT_EQ(updates->size(), 1u);
  EXPECT_EQ((*updates)[0].seq_id, b);
  plan = s.next_step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->released, (std::vector<SeqId>{a}));
  EXPECT_EQ(ids_in(*plan), (std::vector<SeqId>{b}));
}

TEST(Scheduler, RefusesWhenTheQueueIsFull) {
  SchedulerConfig c = config(64, 16);
  c.max_queue = 2;
  Scheduler s(c);
  submit(s, make_request(4, 4));
  submit(s, make_request(4, 4));
  auto refused = s.submit(make_request(4, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max-queue 2"), std::string::npos) << refused.status();
  ASSERT_TRUE(run_step(s).has_value());  // both admitted: the queue is empty again
  EXPECT_TRUE(s.submit(make_request(4, 4)).ok());
}

TEST(Scheduler, RefusesARequestTheWholeCacheCannotHold) {
  Scheduler s(config(4, 4));  // 16 positions
  // 10 prompt + 7 new writes 16 positions (the last token is never fed): fits.
  EXPECT_TRUE(s.submit(make_request(10, 7)).ok());
  auto refused = s.submit(make_request(10, 8));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("17 KV positions"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("holds 16"), std::string::npos) << refused.status();
  // The one that fits runs to the end alone in the cache.
  EXPECT_EQ(run_to_end(s).begin()->second, FinishReason::kLength);
}

TEST(Scheduler, StopsAtMaxNewTokensAndAtTheContext) {
  Scheduler s(config(64, 4));
  const SeqId length = submit(s, make_request(5, 3));
  RequestSpec spec;
  spec.prompt_len = 8;
  spec.max_context = 12;  // max_new_tokens unset: 4
  const SeqId context = submit(s, make_request(spec));
  spec.max_new_tokens = 4;  // the same limit, asked for
  const SeqId asked = submit(s, make_request(spec));
  std::map<SeqId, std::vector<int32_t>> outputs;
  std::map<SeqId, FinishReason> reasons;
  while (!s.idle()) {
    auto run = run_step(s);
    ASSERT_TRUE(run.has_value());
    for (const SequenceUpdate& u : run->updates) {
      outputs[u.seq_id].insert(outputs[u.seq_id].end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finish_reason.has_value()) reasons[u.seq_id] = *u.finish_reason;
    }
  }
  EXPECT_EQ(outputs[length].size(), 3u);
  EXPECT_EQ(reasons[length], FinishReason::kLength);
  EXPECT_EQ(outputs[context].size(), 4u);
  EXPECT_EQ(reasons[context], FinishReason::kContext);
  EXPECT_EQ(reasons[asked], FinishReason::kLength);
  EXPECT_EQ(s.stats().free_pages, 64);
}

TEST(Scheduler, StopsAtEosAndStopTokenIds) {
  Scheduler s(config(64, 4));
  const SeqId eos = submit(s, make_request(4, 20));
  RequestSpec spec;
  spec.max_new_tokens = 20;
  spec.stop_token_ids = {77};
  const SeqId stop = submit(s, make_request(spec));
  spec.ignore_eos = true;
  spec.stop_token_ids = {};
  const SeqId ignoring = submit(s, make_request(spec));
  // Position 6 (the third output token) samples EOS for everyone and 77 for `stop` one later.
  const TokenFn token = [&](SeqId seq, int32_t position) {
    if (seq == stop) return position == 5 ? 77 : 50;
    return position == 6 ? kEos : 50;
  };
  std::map<SeqId, std::vector<int32_t>> outputs;
  std::map<SeqId, FinishReason> reasons;
  while (!s.idle()) {
    auto run = run_step(s, token);
    ASSERT_TRUE(run.has_value());
    for (const SequenceUpdate& u : run->updates) {
      outputs[u.seq_id].insert(outputs[u.seq_id].end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finish_reason.has_value()) reasons[u.seq_id] = *u.finish_reason;
    }
  }
  EXPECT_EQ(outputs[eos], (std::vector<int32_t>{50, 50, kEos}));
  EXPECT_EQ(reasons[eos], FinishReason::kEos);
  EXPECT_EQ(outputs[stop], (std::vector<int32_t>{50, 77}));
  EXPECT_EQ(reasons[stop], FinishReason::kStopToken);
  EXPECT_EQ(outputs[ignoring].size(), 20u);
  EXPECT_EQ(outputs[ignoring][2], kEos);
  EXPECT_EQ(reasons[ignoring], FinishReason::kLength);
}

TEST(Scheduler, MultiStepDecodeReservesPagesAhead) {
  SchedulerConfig c = config(64, 4);
  c.decode_steps = 4;
  Scheduler s(c);
  const SeqId a = submit(s, make_request(5, 10));

  // Prefill and four samples: positions 0..7 written, page table covers 5 + 4 - 1 = 8.
  auto run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->plan.decode_steps, 4);
  EXPECT_GE(run->plan.sequences[0].page_table.size(), 2u);
  ASSERT_EQ(run->updates.size(), 1u);
  EXPECT_EQ(run->updates[0].new_tokens.size(), 4u);
  EXPECT_EQ(s.sequence_info(a)->num_computed, 8);

  // Decode from position 8 over four iterations needs 12 positions: 3 pages.
  run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->plan.sequences[0].start_pos, 8);
  EXPECT_EQ(run->plan.decode_steps, 4);
  EXPECT_EQ(run->plan.sequences[0].page_table.size(), 3u);

  // Two tokens remain: the step runs two iterations and needs 14 positions.
  run = run_step(s);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->plan.decode_steps, 2);
  EXPECT_EQ(run->plan.sequences[0].page_table.size(), 4u);
  ASSERT_EQ(run->updates.size(), 1u);
  EXPECT_EQ(run->updates[0].finish_reason, FinishReason::kLength);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.stats().generated_tokens, 10);
}

TEST(Scheduler, MultiStepDecodeDropsTokensAfterAStop) {
  SchedulerConfig c = config(64, 4);
  c.decode_steps = 4;
  Scheduler s(c);
  const SeqId a = submit(s, make_request(5, 10));
  const SeqId b = submit(s, make_request(5, 10));
  const TokenFn token = [&](SeqId seq, int32_t position) { return seq == a && position == 6 ? kEos : 60; };
  auto run = run_step(s, token);
  ASSERT_TRUE(run.has_value());
  ASSERT_EQ(run->updates.size(), 2u);
  EXPECT_EQ(run->updates[0].new_tokens, (std::vector<int32_t>{60, kEos}));
  EXPECT_EQ(run->updates[0].finish_reason, FinishReason::kEos);
  EXPECT_EQ(run->updates[1].new_tokens.size(), 4u);
  EXPECT_FALSE(run->updates[1].finish_reason.has_value());
  EXPECT_FALSE(s.sequence_info(a).has_value());
  EXPECT_EQ(s.output_tokens(b), (std::vector<int32_t>{60, 60, 60, 60}));
}

TEST(Scheduler, PreemptsTheNewestSequenceAndRecomputesIt) {
  // 6 pages of 4 positions; two sequences of 4 + 16 need 5 pages each at their end.
  SchedulerConfig c = config(6, 4);
  Scheduler s(c);
  const SeqId a = submit(s, make_request(4, 16));
  const SeqId b = submit(s, make_request(4, 16));
  const TokenFn token = [](SeqId seq, int32_t position) { return 200 + static_cast<int32_t>(seq) * 50 + position; };
  std::map<SeqId, std::vector<int32_t>> outputs;
  bool saw_recompute = false;
  bool saw_release = false;
  for (int i = 0; i < 200 && !s.idle(); ++i) {
    auto run = run_step(s, token);
    ASSERT_TRUE(run.has_value());
    for (const SeqId id : run->plan.released) saw_release |= id == b;
    if (const SequencePlan* seq = find_seq(run->plan, b);
        seq != nullptr && seq->start_pos == 0 && seq->tokens.size() > 4u) {
      saw_recompute = true;
      EXPECT_EQ(seq->prompt_len, 4);
      EXPECT_TRUE(saw_release) << "release must come with or before the recomputation";
      // The recomputed tokens are the prompt followed by what b had generated.
      for (size_t p = 4; p < seq->tokens.size(); ++p) {
        EXPECT_EQ(seq->tokens[p], token(b, static_cast<int32_t>(p)));
      }
    }
    for (const SequenceUpdate& u : run->updates) {
      outputs[u.seq_id].insert(outputs[u.seq_id].end(), u.new_tokens.begin(), u.new_tokens.end());
    }
  }
  EXPECT_TRUE(s.idle());
  EXPECT_GE(s.stats().preemptions, 1);
  EXPECT_TRUE(saw_recompute);
  for (const SeqId id : {a, b}) {
    ASSERT_EQ(outputs[id].size(), 16u);
    for (int32_t i = 0; i < 16; ++i) EXPECT_EQ(outputs[id][i], token(id, 4 + i));
  }
  EXPECT_EQ(s.stats().free_pages, 6);
}

TEST(Scheduler, BadOutcomesChangeNothing) {
  Scheduler s(config(32, 4));
  const SeqId a = submit(s, make_request(4, 10));
  EXPECT_EQ(s.complete_step(StepOutcome{1, {}}).status().code(), absl::StatusCode::kFailedPrecondition);
  std::optional<StepPlan> plan = s.next_step();
  ASSERT_TRUE(plan.has_value());

  StepOutcome wrong_id = respond(*plan);
  wrong_id.step_id += 1;
  EXPECT_EQ(s.complete_step(wrong_id).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.complete_step(StepOutcome{plan->step_id, {}}).status().code(), absl::StatusCode::kInvalidArgument);
  StepOutcome stranger = respond(*plan);
  stranger.sequences.push_back({a + 100, {5}});
  EXPECT_EQ(s.complete_step(stranger).status().code(), absl::StatusCode::kInvalidArgument);
  StepOutcome too_many = respond(*plan);
  too_many.sequences[0].token_ids.push_back(5);
  EXPECT_EQ(s.complete_step(too_many).status().code(), absl::StatusCode::kInvalidArgument);
  StepOutcome twice = respond(*plan);
  twice.sequences.push_back(twice.sequences[0]);
  EXPECT_EQ(s.complete_step(twice).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.step_in_flight());
  EXPECT_EQ(s.sequence_info(a)->num_computed, 0);

  // An abandoned step is redone as it was.
  s.abandon_step();
  std::optional<StepPlan> again = s.next_step();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->sequences[0].tokens, plan->sequences[0].tokens);
  EXPECT_EQ(again->sequences[0].start_pos, 0);
  auto updates = s.complete_step(respond(*again));
  ASSERT_TRUE(updates.ok()) << updates.status();
  EXPECT_EQ(s.sequence_info(a)->num_generated, 1);
  EXPECT_EQ(s.stats().steps, 1);
}

TEST(Scheduler, CancelAllEmptiesEverything) {
  Scheduler s(config(16, 4, /*max_batch=*/2));
  for (int i = 0; i < 4; ++i) submit(s, make_request(6, 8));
  ASSERT_TRUE(s.next_step().has_value());
  const std::vector<SeqId> cancelled = s.cancel_all();
  EXPECT_EQ(cancelled.size(), 4u);
  s.abandon_step();
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.stats().free_pages, 16);
  EXPECT_TRUE(s.check_invariants().ok()) << s.check_invariants();
  EXPECT_FALSE(s.next_step().has_value());
}

TEST(PageAllocator, HandsOutLowestPagesAndTakesThemBack) {
  PageAllocator pages(4);
  std::vector<int32_t> a;
  std::vector<int32_t> b;
  EXPECT_TRUE(pages.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(pages.allocate(2, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pages.free_pages(), 1);
  pages.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pages.free_pages(), 4);
  EXPECT_EQ(pages_for(0, 4), 0);
  EXPECT_EQ(pages_for(4, 4), 1);
  EXPECT_EQ(pages_for(5, 4), 2);
}

}  // namespace
}  // namespace exl3
