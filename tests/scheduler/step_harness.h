// Hand cases of the Scheduler tests (prefix_cache_test, scheduler_rewind_test): a scheduler and a
// fake worker (fake_worker.h) run steps end to end with the invariants checked on the scheduler's
// side after every call; requests are submitted with EOS ignored. Also the small cache of the hand
// cases, prompts of consecutive ids and a sequence's plan in a step.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"
#include "scheduler/fake_worker.h"

namespace exl3::testing {

// A small cache for hand cases: batches of 8, steps and prefill chunks of 64 tokens, a queue of 64,
// one decode iteration per step, prefix reuse on.
inline SchedulerConfig hand_config(int32_t num_pages, int32_t page_size) {
  SchedulerConfig c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.max_batch = 8;
  c.max_step_tokens = 64;
  c.prefill_chunk = 64;
  c.max_queue = 64;
  c.decode_steps = 1;
  c.prefix_cache = true;
  return c;
}

// first, first + 1, ..., first + count - 1.
inline std::vector<int32_t> ids_from(int32_t first, int32_t count) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back(first + i);
  return ids;
}

// The plan of sequence `id` in `plan`; null when it is not there.
inline const SequencePlan* find_seq(const StepPlan& plan, SeqId id) {
  for (const SequencePlan& seq : plan.sequences) {
    if (seq.seq_id == id) return &seq;
  }
  return nullptr;
}

class StepHarness {
 public:
  virtual ~StepHarness() = default;

  // One step; nullopt when nothing ran.
  std::optional<StepPlan> step() {
    std::optional<StepPlan> plan = scheduler_.next_step();
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    if (!plan.has_value()) return std::nullopt;
    const StepOutcome outcome = worker().run(*plan);
    auto updates = scheduler_.complete_step(outcome);
    EXPECT_TRUE(updates.ok()) << updates.status();
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    if (updates.ok()) {
      for (const SequenceUpdate& u : *updates) on_update(u);
    }
    return plan;
  }

  void run_to_end(int max_steps = 1000) {
    for (int i = 0; i < max_steps && !scheduler_.idle(); ++i) {
      if (!step().has_value()) break;
    }
    EXPECT_TRUE(scheduler_.idle());
  }

  Scheduler& scheduler() { return scheduler_; }

 protected:
  explicit StepHarness(const SchedulerConfig& c) : scheduler_(c) {}

  virtual PagedKvWorker& worker() = 0;
  virtual void on_update(const SequenceUpdate&) {}

  // Validates and submits `prompt` for `max_new_tokens` (EOS ignored) with `seed` and the banned
  // ids `banned`; returns the request as validated in *validated.
  SeqId submit_request(const std::vector<int32_t>& prompt, int32_t max_new_tokens, uint64_t seed,
                       const ModelLimits& limits, const std::vector<int32_t>& banned, ValidatedRequest* validated) {
    GenerateParams params;
    params.prompt = prompt;
    params.stopping.max_new_tokens = max_new_tokens;
    params.stopping.ignore_eos = true;
    params.sampling.seed = seed;
    params.sampling.banned_token_ids = banned;
    auto request = validate_request(params, limits, prompt, 0);
    EXPECT_TRUE(request.ok()) << request.status();
    auto id = scheduler_.submit(*request);
    EXPECT_TRUE(id.ok()) << id.status();
    *validated = *std::move(request);
    return *id;
  }

  Scheduler scheduler_;
};

}  // namespace exl3::testing
