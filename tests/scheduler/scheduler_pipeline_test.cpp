// Scheduler with SchedulerConfig::pipeline, hand cases (the random traffic is in
// scheduler_simulation_test): a step planned while another is in flight continues sampling
// sequences from their last sample at the projected position; a stop token, max_new_tokens, a
// cancellation or a rewind reconciles when the earlier step completes (the later step's part for
// that sequence is void, releases follow, a rewound sequence is planned again explicitly); a third
// step is never planned while two are in flight, and a rewind then is refused. Invariants are
// checked after every call.
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

constexpr int32_t kVocab = 100;
constexpr int32_t kEos = 1;

SchedulerConfig pipeline_config(int32_t decode_steps) {
  SchedulerConfig c;
  c.num_pages = 32;
  c.page_size = 8;
  c.max_batch = 4;
  c.max_step_tokens = 64;
  c.prefill_chunk = 64;
  c.max_queue = 8;
  c.decode_steps = decode_steps;
  c.prefix_cache = true;
  c.pipeline = true;
  return c;
}

class Pipelined : public ::testing::Test {
 protected:
  void start(int32_t decode_steps) { scheduler_.emplace(pipeline_config(decode_steps)); }
  Scheduler& s() { return *scheduler_; }

  SeqId submit(std::vector<int32_t> prompt, int32_t max_new_tokens, std::vector<int32_t> stop_ids = {}) {
    GenerateParams params;
    params.prompt = prompt;
    params.stopping.max_new_tokens = max_new_tokens;
    params.stopping.ignore_eos = true;
    params.stopping.stop_token_ids = std::move(stop_ids);
    params.sampling.seed = 5;
    auto request = validate_request(params, ModelLimits{kVocab, 256, {kEos}}, prompt, 0);
    EXPECT_TRUE(request.ok()) << request.status();
    auto id = s().submit(*request);
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  StepPlan plan() {
    std::optional<StepPlan> p = s().next_step();
    check();
    EXPECT_TRUE(p.has_value());
    return p.value_or(StepPlan{});
  }

  // Completes `plan` with `tokens` per sampling sequence; returns the updates by sequence.
  std::map<SeqId, SequenceUpdate> complete(const StepPlan& plan, const std::map<SeqId, std::vector<int32_t>>& tokens) {
    StepOutcome outcome;
    outcome.step_id = plan.step_id;
    for (const auto& [id, ids] : tokens) outcome.sequences.push_back({id, ids});
    absl::StatusOr<std::vector<SequenceUpdate>> updates = s().complete_step(outcome);
    EXPECT_TRUE(updates.ok()) << updates.status();
    check();
    std::map<SeqId, SequenceUpdate> out;
    if (updates.ok()) {
      for (const SequenceUpdate& u : *updates) out[u.seq_id] = u;
    }
    return out;
  }

  void check() { EXPECT_TRUE(s().check_invariants().ok()) << s().check_invariants(); }

  static const SequencePlan* find(const StepPlan& plan, SeqId id) {
    for (const SequencePlan& q : plan.sequences) {
      if (q.seq_id == id) return &q;
    }
    return nullptr;
  }

  std::optional<Scheduler> scheduler_;
};

TEST_F(Pipelined, ContinuesFromTheLastSampleAtTheProjectedPosition) {
  start(2);
  const SeqId a = submit({10, 11, 12, 13, 14}, 20);
  const StepPlan p1 = plan();
  ASSERT_NE(find(p1, a), nullptr);
  EXPECT_FALSE(find(p1, a)->from_last_sample);
  EXPECT_EQ(find(p1, a)->tokens.size(), 5u);
  const StepPlan p2 = plan();  // p1 in flight
  const SequencePlan* q = find(p2, a);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(q->from_last_sample);
  EXPECT_TRUE(q->tokens.empty());
  EXPECT_TRUE(q->sample);
  EXPECT_EQ(q->start_pos, 6);  // 5 prompt tokens + 2 samples, the last not yet run
  EXPECT_EQ(p2.decode_steps, 2);
  EXPECT_GE(static_cast<int32_t>(q->page_table.size()) * 8, 6 + 1 + 1);
  EXPECT_EQ(s().steps_in_flight(), 2);
  EXPECT_EQ(complete(p1, {{a, {20, 21}}})[a].new_tokens, (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(complete(p2, {{a, {22, 23}}})[a].new_tokens, (std::vector<int32_t>{22, 23}));
  EXPECT_EQ(s().output_tokens(a), (std::vector<int32_t>{20, 21, 22, 23}));
  EXPECT_EQ(s().sequence_info(a)->num_computed, 8);
}

TEST_F(Pipelined, AStopTokenVoidsTheStepAlreadySent) {
  start(2);
  const SeqId a = submit({10, 11, 12}, 20, {21});
  const SeqId b = submit({30, 31, 32, 33}, 20);
  const StepPlan p1 = plan();
  const StepPlan p2 = plan();
  ASSERT_TRUE(find(p2, a) != nullptr && find(p2, b) != nullptr);
  std::map<SeqId, SequenceUpdate> u1 = complete(p1, {{a, {20, 21}}, {b, {40, 41}}});
  EXPECT_EQ(u1[a].new_tokens, (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(u1[a].finish_reason, FinishReason::kStopToken);
  EXPECT_FALSE(u1[b].finish_reason.has_value());
  // p2 still computed a's continuation; its tokens are dropped, b's are taken.
  std::map<SeqId, SequenceUpdate> u2 = complete(p2, {{a, {22, 23}}, {b, {42, 43}}});
  EXPECT_EQ(u2.count(a), 0u);
  EXPECT_EQ(u2[b].new_tokens, (std::vector<int32_t>{42, 43}));
  // The release of a reaches the workers with the next step, after p2.
  const StepPlan p3 = plan();
  EXPECT_EQ(p3.released, (std::vector<SeqId>{a}));
  EXPECT_EQ(find(p3, a), nullptr);
  EXPECT_EQ(s().stats().generated_tokens, 6);
  EXPECT_EQ(s().stats().completed, 1);
}

TEST_F(Pipelined, MaxNewTokensLeavesTheSequenceOutOfTheNextStep) {
  start(2);
  const SeqId a = submit({10, 11, 12, 13, 14}, 3);
  const StepPlan p1 = plan();
  EXPECT_EQ(p1.decode_steps, 2);
  const StepPlan p2 = plan();
  ASSERT_NE(find(p2, a), nullptr);
  EXPECT_EQ(p2.decode_steps, 1);  // one token left after p1's two
  complete(p1, {{a, {20, 21}}});
  // a surely ends in p2: nothing to plan while it runs.
  EXPECT_FALSE(s().next_step().has_value());
  check();
  std::map<SeqId, SequenceUpdate> u2 = complete(p2, {{a, {22}}});
  EXPECT_EQ(u2[a].finish_reason, FinishReason::kLength);
  EXPECT_EQ(s().output_tokens(a).size(), 0u);  // ended: no live sequence
  EXPECT_TRUE(s().idle());
  EXPECT_EQ(s().take_released(), (std::vector<SeqId>{a}));
}

TEST_F(Pipelined, ARewindVoidsTheStepInFlightAndPlansTheSequenceAgain) {
  start(1);
  const SeqId a = submit({10, 11, 12, 13, 14}, 20);
  const StepPlan p1 = plan();
  const StepPlan p2 = plan();
  // Two steps in flight: no rewind, no third plan.
  EXPECT_EQ(s().rewind(a, 0, 20).code(), absl::StatusCode::kFailedPrecondition);
  complete(p1, {{a, {20}}});
  const StepPlan p3 = plan();
  ASSERT_TRUE(find(p3, a) != nullptr && find(p3, a)->from_last_sample);
  EXPECT_EQ(find(p3, a)->start_pos, 6);
  complete(p2, {{a, {21}}});
  // A banned string over output tokens 1..: keep [20], ban 21 at output position 1.
  ASSERT_TRUE(s().rewind(a, 1, 21).ok());
  check();
  const StepPlan p4 = plan();  // p3 in flight, void for a
  const SequencePlan* q = find(p4, a);
  ASSERT_NE(q, nullptr);
  EXPECT_FALSE(q->from_last_sample);
  EXPECT_EQ(q->tokens, (std::vector<int32_t>{20}));
  EXPECT_EQ(q->start_pos, 5);
  EXPECT_EQ(q->banned_now, (std::vector<int32_t>{21}));
  EXPECT_EQ(complete(p3, {{a, {22}}}).count(a), 0u);
  EXPECT_EQ(complete(p4, {{a, {30}}})[a].new_tokens, (std::vector<int32_t>{30}));
  EXPECT_EQ(s().output_tokens(a), (std::vector<int32_t>{20, 30}));
  // And the pipeline goes on from there.
  const StepPlan p5 = plan();
  const StepPlan p6 = plan();
  EXPECT_EQ(find(p5, a)->tokens, (std::vector<int32_t>{30}));
  EXPECT_TRUE(find(p6, a)->from_last_sample);
  EXPECT_EQ(find(p6, a)->start_pos, 7);
}

TEST_F(Pipelined, CancellationWhileTwoStepsRun) {
  start(3);
  const SeqId a = submit({10, 11, 12}, 30);
  const SeqId b = submit({40, 41}, 30);
  const StepPlan p1 = plan();
  const StepPlan p2 = plan();
  ASSERT_TRUE(s().cancel(a).ok());
  check();
  std::map<SeqId, SequenceUpdate> u1 = complete(p1, {{a, {1, 2, 3}}, {b, {4, 5, 6}}});
  EXPECT_EQ(u1.count(a), 0u);
  EXPECT_EQ(u1[b].new_tokens.size(), 3u);
  std::map<SeqId, SequenceUpdate> u2 = complete(p2, {{a, {7, 8, 9}}, {b, {10, 11, 12}}});
  EXPECT_EQ(u2.count(a), 0u);
  EXPECT_EQ(u2[b].new_tokens, (std::vector<int32_t>{10, 11, 12}));
  const StepPlan p3 = plan();
  EXPECT_EQ(p3.released, (std::vector<SeqId>{a}));
  EXPECT_EQ(s().stats().cancelled, 1);
}

TEST_F(Pipelined, AMalformedResultChangesNothingAndCanBeAbandoned) {
  start(2);
  const SeqId a = submit({10, 11, 12}, 30);
  const StepPlan p1 = plan();
  const StepPlan p2 = plan();
  StepOutcome wrong;
  wrong.step_id = p2.step_id;  // not the oldest in flight
  EXPECT_EQ(s().complete_step(wrong).status().code(), absl::StatusCode::kFailedPrecondition);
  StepOutcome too_many;
  too_many.step_id = p1.step_id;
  too_many.sequences.push_back({a, {1, 2, 3}});
  EXPECT_EQ(s().complete_step(too_many).status().code(), absl::StatusCode::kInvalidArgument);
  check();
  s().abandon_step();  // p1: a keeps its state from before it; p2's part for it no longer applies
  EXPECT_EQ(s().steps_in_flight(), 1);
  EXPECT_EQ(complete(p2, {{a, {5, 6}}}).count(a), 0u);
  const StepPlan p3 = plan();
  ASSERT_NE(find(p3, a), nullptr);
  EXPECT_FALSE(find(p3, a)->from_last_sample);
  EXPECT_EQ(find(p3, a)->start_pos, 0);
  EXPECT_EQ(find(p3, a)->tokens, (std::vector<int32_t>{10, 11, 12}));
}

}  // namespace
}  // namespace exl3
