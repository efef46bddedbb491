// Randomized simulation of the Scheduler against a fake worker that keeps a real paged KV "cache"
// of (sequence, position, token) slots: ~1000 steps of random arrivals, lengths, cancellations,
// stop strings and EOS, with the scheduler's invariants checked after every call. The fake worker
// checks that every position a sequence attends to is still intact in the pages its table names
// (so no page is ever shared or reused too early), and that recomputation after preemption yields
// exactly the tokens an uninterrupted run would. Fixed seeds. The pipelined variants keep two steps
// in flight (SchedulerConfig::pipeline, as the serving loop does): the fake worker runs each step
// when it is planned, in order, and continues from_last_sample sequences from the token it sampled
// last; the caller ends sequences while both steps are in flight.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

constexpr int32_t kVocab = 1000;
constexpr int32_t kEos = 2;
constexpr int32_t kContext = 200;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The token "sampled" at `position` of a sequence with `seed`, like the counter-based RNG: a pure
// function of (seed, position), EOS about once in 40 draws.
int32_t sampled_token(uint64_t seed, int32_t position) {
  const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(position)));
  return h % 40 == 0 ? kEos : static_cast<int32_t>(3 + h % (kVocab - 3));
}

struct Truth {
  ValidatedRequest request;
  int32_t token_at(int32_t position) const {
    const int32_t prompt_len = static_cast<int32_t>(request.prompt_ids.size());
    return position < prompt_len ? request.prompt_ids[position] : sampled_token(request.sampling.seed, position);
  }
  // The whole output of an uninterrupted run and why it ends.
  std::pair<std::vector<int32_t>, FinishReason> expected() const {
    const int32_t prompt_len = static_cast<int32_t>(request.prompt_ids.size());
    std::vector<int32_t> out;
    for (int32_t i = 0; i < request.max_new_tokens; ++i) {
      const int32_t t = sampled_token(request.sampling.seed, prompt_len + i);
      out.push_back(t);
      for (const int32_t eos : request.eos_token_ids) {
        if (t == eos) return {out, FinishReason::kEos};
      }
      for (const int32_t stop : request.stop_token_ids) {
        if (t == stop) return {out, FinishReason::kStopToken};
      }
    }
    return {out, request.max_new_tokens_set ? FinishReason::kLength : FinishReason::kContext};
  }
};

// Runs steps the way every rank would: writes KV slots through the page table and reads back every
// earlier position before using it.
class FakeWorker {
 public:
  FakeWorker(const SchedulerConfig& c, const std::map<SeqId, Truth>& truth)
      : page_size_(c.page_size), slots_(static_cast<size_t>(c.num_pages) * c.page_size), truth_(truth) {}

  StepOutcome run(const StepPlan& plan) {
    for (const SeqId id : plan.released) {
      fed_.erase(id);
      last_sample_.erase(id);
    }
    StepOutcome outcome;
    outcome.step_id = plan.step_id;
    for (const SequencePlan& seq : plan.sequences) {
      const Truth& truth = truth_.at(seq.seq_id);
      EXPECT_EQ(seq.prompt_len, static_cast<int32_t>(truth.request.prompt_ids.size()));
      // A sequence starts over (fresh or recomputed) only with no state left on the worker.
      const auto fed = fed_.find(seq.seq_id);
      std::vector<int32_t> tokens = seq.tokens;
      if (seq.from_last_sample) {
        EXPECT_TRUE(tokens.empty()) << "sequence " << seq.seq_id;
        EXPECT_TRUE(seq.sample) << "sequence " << seq.seq_id;
        const auto last = last_sample_.find(seq.seq_id);
        EXPECT_TRUE(last != last_sample_.end()) << "sequence " << seq.seq_id << " continues without a sample";
        if (last != last_sample_.end()) tokens = {last->second};
      }
      if (seq.start_pos == 0) {
        EXPECT_TRUE(fed == fed_.end()) << "sequence " << seq.seq_id << " restarted without a release";
      } else {
        EXPECT_TRUE(fed != fed_.end() && fed->second == seq.start_pos)
            << "sequence " << seq.seq_id << " continues at " << seq.start_pos;
      }
      for (int32_t p = 0; p < seq.start_pos; ++p) {
        const Slot& slot = slots_[slot_index(seq, p)];
        EXPECT_TRUE(slot.seq == seq.seq_id && slot.position == p && slot.token == truth.token_at(p))
            << "KV of sequence " << seq.seq_id << " at " << p << " was overwritten by " << slot.seq;
      }
      int32_t position = seq.start_pos;
      for (const int32_t token : tokens) {
        EXPECT_EQ(token, truth.token_at(position)) << "sequence " << seq.seq_id << " at " << position;
        write(seq, position++, token);
      }
      if (seq.sample) {
        SequenceResult result{seq.seq_id, {}};
        for (int32_t i = 0; i < plan.decode_steps; ++i) {
          const int32_t token = sampled_token(truth.request.sampling.seed, position);
          result.token_ids.push_back(token);
          if (i + 1 < plan.decode_steps) write(seq, position++, token);
        }
        last_sample_[seq.seq_id] = result.token_ids.back();
        outcome.sequences.push_back(std::move(result));
      }
      fed_[seq.seq_id] = position;
    }
    return outcome;
  }

 private:
  struct Slot {
    SeqId seq = 0;
    int32_t position = -1;
    int32_t token = -1;
  };

  size_t slot_index(const SequencePlan& seq, int32_t position) const {
    const size_t logical = static_cast<size_t>(position / page_size_);
    EXPECT_LT(logical, seq.page_table.size()) << "sequence " << seq.seq_id << " position " << position;
    if (logical >= seq.page_table.size()) return 0;
    return static_cast<size_t>(seq.page_table[logical]) * page_size_ + position % page_size_;
  }
  void write(const SequencePlan& seq, int32_t position, int32_t token) {
    slots_[slot_index(seq, position)] = Slot{seq.seq_id, position, token};
  }

  int32_t page_size_;
  std::vector<Slot> slots_;
  const std::map<SeqId, Truth>& truth_;
  std::map<SeqId, int32_t> fed_;          // positions fed per live sequence
  std::map<SeqId, int32_t> last_sample_;  // the last token sampled per live sequence
};

class Simulation {
 public:
  Simulation(SchedulerConfig c, uint64_t seed) : config_(c), scheduler_(c), worker_(c, truth_), rng_(seed) {}

  void run(int steps, bool arrivals) {
    const size_t depth = static_cast<size_t>(max_steps_in_flight(config_));
    for (int i = 0; i < steps; ++i) {
      if (!arrivals && scheduler_.idle() && in_flight_.empty()) return;
      if (arrivals) maybe_submit();
      maybe_end(0.03);
      while (in_flight_.size() < depth) {
        std::optional<StepPlan> plan = scheduler_.next_step();
        check();
        if (!plan.has_value()) break;
        check_plan(*plan);
        ++steps_;
        in_flight_.push_back(worker_.run(*plan));  // the workers run steps in the order sent
      }
      if (in_flight_.empty()) continue;
      maybe_end(0.04);  // cancellations and stop strings while the steps run
      auto updates = scheduler_.complete_step(in_flight_.front());
      in_flight_.pop_front();
      ASSERT_TRUE(updates.ok()) << updates.status();
      check();
      for (const SequenceUpdate& u : *updates) apply(u);
    }
  }

  const Scheduler& scheduler() const { return scheduler_; }
  int64_t finished() const { return finished_; }
  int64_t ended_by_caller() const { return ended_by_caller_; }
  int64_t refused_queue() const { return refused_queue_; }
  int64_t refused_size() const { return refused_size_; }
  int64_t steps() const { return steps_; }
  size_t live() const { return outputs_.size(); }

 private:
  void check() { ASSERT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants(); }

  void check_plan(const StepPlan& plan) {
    EXPECT_GE(plan.decode_steps, 1);
    EXPECT_LE(plan.decode_steps, config_.decode_steps);
    EXPECT_LE(static_cast<int32_t>(plan.sequences.size()), config_.max_batch);
    std::set<int32_t> pages;
    int32_t tokens = 0;
    for (const SequencePlan& seq : plan.sequences) {
      EXPECT_EQ(seq.from_last_sample, seq.tokens.empty()) << "sequence " << seq.seq_id;
      const int32_t len = seq.from_last_sample ? 1 : static_cast<int32_t>(seq.tokens.size());
      tokens += len;
      if (len > 1) {
        EXPECT_LE(len, config_.prefill_chunk);
      }
      EXPECT_GE(static_cast<int64_t>(seq.page_table.size()) * config_.page_size,
                seq.start_pos + len + (seq.sample ? plan.decode_steps - 1 : 0));
      for (const int32_t page : seq.page_table) EXPECT_TRUE(pages.insert(page).second) << "page " << page;
    }
    EXPECT_LE(tokens, config_.max_step_tokens);
  }

  void maybe_submit() {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng_) > 0.6) return;
    GenerateParams params;
    const bool oversized = u(rng_) < 0.02;
    const int32_t prompt_len = oversized ? 150 : std::uniform_int_distribution<int32_t>(1, 120)(rng_);
    // An oversized request is valid for a model with a longer context but not for this cache.
    const ModelLimits limits{kVocab, oversized ? 2 * kContext : kContext, {kEos}};
    std::vector<int32_t> ids(prompt_len);
    for (int32_t& id : ids) id = std::uniform_int_distribution<int32_t>(3, kVocab - 1)(rng_);
    params.prompt = ids;
    if (oversized) {
      params.stopping.max_new_tokens = 100;  // 249 positions: more than the 200 the cache holds
    } else if (u(rng_) < 0.5) {
      params.stopping.max_new_tokens = std::uniform_int_distribution<int32_t>(1, kContext - prompt_len)(rng_);
    }
    if (u(rng_) < 0.2) params.stopping.ignore_eos = true;
    if (u(rng_) < 0.2) params.stopping.stop_token_ids = {std::uniform_int_distribution<int32_t>(3, 60)(rng_)};
    params.sampling.seed = rng_();
    auto request = validate_request(params, limits, ids, 0);
    ASSERT_TRUE(request.ok()) << request.status();
    const SchedulerStats before = scheduler_.stats();
    auto id = scheduler_.submit(*request);
    if (!id.ok()) {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
      if (oversized) {
        ++refused_size_;
      } else {
        EXPECT_GE(before.queued, config_.max_queue) << id.status();  // preempted ones count too
        ++refused_queue_;
      }
      return;
    }
    ASSERT_FALSE(oversized) << "a request larger than the cache was accepted";
    truth_.emplace(*id, Truth{*request});
    outputs_[*id] = {};
  }

  // Cancels a random live sequence, or finishes it as a stop string would.
  void maybe_end(double probability) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (outputs_.empty() || u(rng_) > probability) return;
    auto it = outputs_.begin();
    std::advance(it, std::uniform_int_distribution<size_t>(0, outputs_.size() - 1)(rng_));
    const SeqId id = it->first;
    const absl::Status status =
        u(rng_) < 0.5 ? scheduler_.cancel(id) : scheduler_.finish(id, FinishReason::kStopString);
    ASSERT_TRUE(status.ok()) << status;
    outputs_.erase(it);
    ++ended_by_caller_;
  }

  void apply(const SequenceUpdate& u) {
    auto it = outputs_.find(u.seq_id);
    ASSERT_NE(it, outputs_.end()) << "update for ended sequence " << u.seq_id;
    it->second.insert(it->second.end(), u.new_tokens.begin(), u.new_tokens.end());
    const auto [expected, reason] = truth_.at(u.seq_id).expected();
    if (!u.finish_reason.has_value()) {
      ASSERT_LT(it->second.size(), expected.size());
      EXPECT_TRUE(std::equal(it->second.begin(), it->second.end(), expected.begin()))
          << "sequence " << u.seq_id << " diverged";
      return;
    }
    EXPECT_EQ(it->second, expected) << "sequence " << u.seq_id;
    EXPECT_EQ(*u.finish_reason, reason) << "sequence " << u.seq_id;
    outputs_.erase(it);
    ++finished_;
  }

  SchedulerConfig config_;
  Scheduler scheduler_;
  std::map<SeqId, Truth> truth_;
  FakeWorker worker_;
  std::mt19937_64 rng_;
  std::map<SeqId, std::vector<int32_t>> outputs_;  // live sequences and what they produced so far
  int64_t finished_ = 0;
  int64_t ended_by_caller_ = 0;
  int64_t refused_queue_ = 0;
  int64_t refused_size_ = 0;
  int64_t steps_ = 0;
  std::deque<StepOutcome> in_flight_;  // results of the steps sent, oldest first
};

SchedulerConfig simulation_config(int32_t decode_steps, bool pipeline) {
  SchedulerConfig c;
  // 200 positions: every request of a 200-token context fits alone, and a few long ones fill the
  // cache, so preemption happens.
  c.num_pages = 25;
  c.page_size = 8;
  c.max_batch = 6;
  c.max_step_tokens = 48;
  c.prefill_chunk = 20;
  c.max_queue = 8;
  c.decode_steps = decode_steps;
  c.prefix_cache = false;  // the fake worker checks pages are never shared (prefix_cache_test.cpp covers reuse)
  c.pipeline = pipeline;
  return c;
}

void run_simulation(int32_t decode_steps, uint64_t seed, bool pipeline = false) {
  const SchedulerConfig c = simulation_config(decode_steps, pipeline);
  Simulation sim(c, seed);
  sim.run(1000, /*arrivals=*/true);
  ASSERT_FALSE(testing::Test::HasFatalFailure());
  sim.run(20000, /*arrivals=*/false);  // drain
  ASSERT_FALSE(testing::Test::HasFatalFailure());
  const SchedulerStats stats = sim.scheduler().stats();
  EXPECT_TRUE(sim.scheduler().idle());
  EXPECT_EQ(sim.live(), 0u);
  EXPECT_EQ(stats.free_pages, c.num_pages);
  EXPECT_EQ(stats.queued, 0);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.steps, sim.steps());
  EXPECT_EQ(stats.completed + stats.cancelled, stats.submitted);
  // The traffic exercised what it is meant to.
  EXPECT_GT(sim.finished(), 20);
  EXPECT_GT(sim.ended_by_caller(), 10);
  EXPECT_GT(sim.refused_queue(), 0);
  EXPECT_GT(sim.refused_size(), 0);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.largest_batch, 2);
  int64_t histogram_steps = 0;
  for (const int64_t n : stats.batch_size_counts) histogram_steps += n;
  EXPECT_EQ(histogram_steps, stats.steps);
  EXPECT_EQ(stats.batch_size_counts[0], 0);
  std::printf(
      "decode_steps %d%s: %lld steps, %lld finished, %lld ended by caller, %lld preemptions, "
      "largest batch %d, refused %lld (queue) + %lld (size)\n",
      decode_steps, pipeline ? " pipelined" : "", static_cast<long long>(stats.steps),
      static_cast<long long>(sim.finished()), static_cast<long long>(sim.ended_by_caller()),
      static_cast<long long>(stats.preemptions), stats.largest_batch, static_cast<long long>(sim.refused_queue()),
      static_cast<long long>(sim.refused_size()));
}

TEST(SchedulerSimulation, RandomTrafficSingleStepDecode) { run_simulation(1, 20240601); }

TEST(SchedulerSimulation, RandomTrafficMultiStepDecode) { run_simulation(3, 777); }

TEST(SchedulerSimulation, RandomTrafficPipelinedSingleStepDecode) { run_simulation(1, 20240601, /*pipeline=*/true); }

TEST(SchedulerSimulation, RandomTrafficPipelinedMultiStepDecode) { run_simulation(3, 777, /*pipeline=*/true); }

TEST(SchedulerSimulation, PipelineAndSpeculativeAreRefused) {
  SchedulerConfig c = simulation_config(3, /*pipeline=*/true);
  c.speculative = true;
  const absl::Status status = validate_scheduler_config(c);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

}  // namespace
}  // namespace exl3
