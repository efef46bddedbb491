// Random traffic for the Scheduler tests (prefix_cache_test, scheduler_rewind_test): seeded
// requests drawn, like real traffic, mostly from a few shared prefixes, the small cache they run
// through, the loop of a randomized run through a fake worker (fake_worker.h) and the checks of a
// drained scheduler.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"
#include "scheduler/fake_worker.h"

namespace exl3::testing {

struct RandomRequest {
  std::vector<int32_t> prompt;
  GenerateParams params;  // holds the prompt too
};

// Three shared prefixes of 7, 18 and 33 ids in [3, vocab). A prompt is one of them (70% whole,
// else cut short) plus 0..12 random ids (85%), or 1..40 random ids; 1..40 new tokens within
// `context`; EOS ignored 30% of the time; one common seed 30% of the time (identical
// continuations), else a random one. The same seed draws the same requests.
class RandomRequests {
 public:
  RandomRequests(uint64_t seed, int32_t vocab, int32_t context) : rng_(seed), vocab_(vocab), context_(context) {
    for (const int32_t len : {7, 18, 33}) {
      std::vector<int32_t> p(len);
      for (int32_t& t : p) t = uniform(3, vocab_ - 1);
      prefixes_.push_back(p);
    }
  }

  int32_t uniform(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }
  double coin() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

  RandomRequest draw() {
    RandomRequest r;
    std::vector<int32_t>& prompt = r.prompt;
    if (coin() < 0.85) {
      // A shared prefix, sometimes cut short, then a random suffix.
      const std::vector<int32_t>& p = prefixes_[uniform(0, static_cast<int32_t>(prefixes_.size()) - 1)];
      const int32_t keep = coin() < 0.7 ? static_cast<int32_t>(p.size()) : uniform(1, static_cast<int32_t>(p.size()));
      prompt.assign(p.begin(), p.begin() + keep);
      const int32_t suffix = uniform(0, 12);
      for (int32_t i = 0; i < suffix; ++i) prompt.push_back(uniform(3, vocab_ - 1));
    } else {
      const int32_t len = uniform(1, 40);
      for (int32_t i = 0; i < len; ++i) prompt.push_back(uniform(3, vocab_ - 1));
    }
    r.params.prompt = prompt;
    r.params.stopping.max_new_tokens = uniform(1, std::min(40, context_ - static_cast<int32_t>(prompt.size())));
    if (coin() < 0.3) r.params.stopping.ignore_eos = true;
    r.params.sampling.seed = coin() < 0.3 ? 12345 : rng_();
    return r;
  }

 private:
  std::mt19937_64 rng_;
  int32_t vocab_;
  int32_t context_;
  std::vector<std::vector<int32_t>> prefixes_;
};

// 120 positions in pages of 4: a 90-token context fits alone, a few running sequences fill the
// cache; short prefill chunks and a short queue.
inline SchedulerConfig random_traffic_config(int32_t decode_steps, bool prefix_cache) {
  SchedulerConfig c;
  c.num_pages = 30;
  c.page_size = 4;
  c.max_batch = 6;
  c.max_step_tokens = 40;
  c.prefill_chunk = 16;
  c.max_queue = 10;
  c.decode_steps = decode_steps;
  c.prefix_cache = prefix_cache;
  return c;
}

// After random traffic: nothing runs or waits, every page is free or cached and none shared, and
// every request submitted completed or was cancelled.
inline void expect_drained(const Scheduler& scheduler) {
  const SchedulerStats s = scheduler.stats();
  EXPECT_TRUE(scheduler.idle());
  EXPECT_EQ(s.free_pages + s.cached_pages, scheduler.config().num_pages) << "pages leaked";
  EXPECT_EQ(s.shared_pages, 0);
  EXPECT_EQ(s.completed + s.cancelled, s.submitted);
}

// A randomized run through a Scheduler and a fake worker: while fewer than `requests` were
// submitted, maybe submit a random request (60%), maybe end a live one (2%) and step; then step
// until idle, stopping at the first failure. Each step may also end a live sequence (3%) while
// the worker runs; the invariants are checked after every call. A subclass keeps its requests'
// expectations: it registers each accepted request (on_submitted), ends a live one at random
// (maybe_end, through end_at_random) and checks each update (apply).
class RandomTraffic {
 public:
  virtual ~RandomTraffic() = default;

  void run(int32_t requests) {
    int guard = 0;
    while (submitted_ < requests && ++guard < guard_limit_) {
      maybe_submit();
      maybe_end(0.02);
      if (!step()) return;
    }
    for (int i = 0; i < guard_limit_ && !scheduler_.idle(); ++i) {
      if (!step()) return;
    }
  }

  const Scheduler& scheduler() const { return scheduler_; }
  int32_t submitted() const { return submitted_; }

 protected:
  // Requests of `vocab` ids within `context` tokens, EOS `eos`; at most `guard_limit` iterations
  // of each phase of run().
  RandomTraffic(const SchedulerConfig& c, uint64_t seed, int32_t vocab, int32_t context, int32_t eos, int guard_limit)
      : scheduler_(c), random_(seed, vocab, context), limits_{vocab, context, {eos}}, guard_limit_(guard_limit) {}

  virtual PagedKvWorker& worker() = 0;
  virtual void on_submitted(SeqId id, const ValidatedRequest& request, const RandomRequest& drawn) = 0;
  virtual void maybe_end(double probability) = 0;
  virtual void apply(const SequenceUpdate& u) = 0;
  // Before the worker runs `plan`, and after its updates reached the scheduler.
  virtual void before_step(const StepPlan&) {}
  virtual void after_step() {}

  int32_t uniform(int32_t lo, int32_t hi) { return random_.uniform(lo, hi); }
  double coin() { return random_.coin(); }

  bool check() {
    const absl::Status s = scheduler_.check_invariants();
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }

  // Ends a random sequence of `live` with `probability` (cancelled or finished as a stop string
  // would) and erases it; true when one ended.
  template <typename T>
  bool end_at_random(std::map<SeqId, T>& live, double probability) {
    if (live.empty() || coin() > probability) return false;
    auto it = live.begin();
    std::advance(it, uniform(0, static_cast<int32_t>(live.size()) - 1));
    const SeqId id = it->first;
    const absl::Status status = coin() < 0.5 ? scheduler_.cancel(id) : scheduler_.finish(id, FinishReason::kStopString);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return false;
    live.erase(it);
    return true;
  }

  Scheduler scheduler_;

 private:
  bool step() {
    std::optional<StepPlan> plan = scheduler_.next_step();
    if (!check()) return false;
    if (!plan.has_value()) return true;
    before_step(*plan);
    const StepOutcome outcome = worker().run(*plan);
    if (::testing::Test::HasFatalFailure()) return false;
    maybe_end(0.03);  // cancellations and stop strings while the step runs
    auto updates = scheduler_.complete_step(outcome);
    EXPECT_TRUE(updates.ok()) << updates.status();
    if (!updates.ok() || !check()) return false;
    after_step();
    for (const SequenceUpdate& u : *updates) apply(u);
    return !::testing::Test::HasFailure();
  }

  void maybe_submit() {
    if (coin() > 0.6) return;
    const RandomRequest r = random_.draw();
    auto request = validate_request(r.params, limits_, r.prompt, 0);
    ASSERT_TRUE(request.ok()) << request.status();
    auto id = scheduler_.submit(*request);
    if (!id.ok()) {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
      return;
    }
    ++submitted_;
    on_submitted(*id, *request, r);
  }

  RandomRequests random_;
  ModelLimits limits_;
  int guard_limit_;
  int32_t submitted_ = 0;
};

}  // namespace exl3::testing
