// Prefix reuse in the Scheduler (PrefixCache): hand cases (a full page shared, a partial page copied
// on write, LRU eviction under pressure, preemption with shared pages, the same prompt twice, a
// prompt shorter than a page, the last prompt token always computed, requests arriving together,
// reuse turned off) and a randomized run of 1,000 mixed requests drawn from a few shared prefixes,
// with cancellations, stop strings, EOS and preemption pressure, checking the invariants after every
// call and every page free or cached at the end.
//
// The fake worker keeps a real paged "KV cache" (fake_worker.h): every position before start_pos
// must hold exactly the fingerprint of the sequence's own tokens (so a shared page, a copy or an
// eviction that went wrong is caught), its token history (penalties) must be the sequence's true
// prefix (history_prefix), and no page written in a step may appear in another sequence's page
// table of that step.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"
#include "scheduler/fake_worker.h"
#include "scheduler/random_traffic.h"
#include "scheduler/step_harness.h"

namespace exl3 {
namespace {

using testing::find_seq;
using testing::ids_from;
using testing::mix;

constexpr int32_t kVocab = 1000;
constexpr int32_t kEos = 2;

// The token sampled at `position` for `seed` (a pure function, like the counter-based RNG); EOS
// about once in `eos_every` draws (0 = never).
int32_t sampled_token(uint64_t seed, int32_t position, int eos_every) {
  const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(position)));
  if (eos_every > 0 && h % eos_every == 0) return kEos;
  return static_cast<int32_t>(3 + h % (kVocab - 3));
}

struct Truth {
  ValidatedRequest request;
  int eos_every = 0;
  int32_t token_at(int32_t position) const {
    const int32_t prompt_len = static_cast<int32_t>(request.prompt_ids.size());
    return position < prompt_len ? request.prompt_ids[position]
                                 : sampled_token(request.sampling.seed, position, eos_every);
  }
};

// The fake paged-KV worker (fake_worker.h) checking every history and token against the truth.
class FakeWorker : public testing::PagedKvWorker {
 public:
  FakeWorker(const SchedulerConfig& c, const std::map<SeqId, Truth>& truth) : PagedKvWorker(c), truth_(truth) {}

 private:
  void check_sequence(const SequencePlan& seq, const std::vector<int32_t>& history) override {
    const Truth& truth = truth_.at(seq.seq_id);
    EXPECT_EQ(seq.prompt_len, static_cast<int32_t>(truth.request.prompt_ids.size()));
    for (int32_t p = 0; p < static_cast<int32_t>(history.size()); ++p) {
      EXPECT_EQ(history[p], truth.token_at(p)) << "history of sequence " << seq.seq_id << " at " << p;
    }
  }

  void check_token(const SequencePlan& seq, int32_t position, int32_t token) override {
    EXPECT_EQ(token, truth_.at(seq.seq_id).token_at(position)) << "sequence " << seq.seq_id << " at " << position;
  }

  int32_t sample(const SequencePlan& seq, int32_t position, int32_t) override {
    const Truth& truth = truth_.at(seq.seq_id);
    return sampled_token(truth.request.sampling.seed, position, truth.eos_every);
  }

  const std::map<SeqId, Truth>& truth_;
};

SchedulerConfig small_config(int32_t num_pages, int32_t page_size, int32_t max_batch = 8) {
  SchedulerConfig c = testing::hand_config(num_pages, page_size);
  c.max_batch = max_batch;
  return c;
}

// A scheduler, the fake worker and the truth of every request; steps run end to end with the
// invariants checked on both sides.
class Harness : public testing::StepHarness {
 public:
  explicit Harness(SchedulerConfig c) : StepHarness(c), worker_(c, truth_) {}

  SeqId submit(const std::vector<int32_t>& prompt, int32_t max_new_tokens, uint64_t seed = 1) {
    ValidatedRequest request;
    const SeqId id = submit_request(prompt, max_new_tokens, seed, ModelLimits{kVocab, 4096, {kEos}}, {}, &request);
    truth_.emplace(id, Truth{request, 0});
    return id;
  }

  const std::vector<int32_t>& output(SeqId id) { return outputs_[id]; }
  // The expected output of a request run alone.
  std::vector<int32_t> expected(SeqId id) const {
    const Truth& t = truth_.at(id);
    std::vector<int32_t> out;
    const int32_t prompt_len = static_cast<int32_t>(t.request.prompt_ids.size());
    for (int32_t i = 0; i < t.request.max_new_tokens; ++i) out.push_back(t.token_at(prompt_len + i));
    return out;
  }

 private:
  testing::PagedKvWorker& worker() override { return worker_; }

  void on_update(const SequenceUpdate& u) override {
    auto& out = outputs_[u.seq_id];
    out.insert(out.end(), u.new_tokens.begin(), u.new_tokens.end());
  }

  std::map<SeqId, Truth> truth_;
  FakeWorker worker_;
  std::map<SeqId, std::vector<int32_t>> outputs_;
};

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The page table A ended with: its pages stay cached, so the next request's plan shows them.
TEST(PrefixCache, SharesFullPagesOfAFinishedRequest) {
  Harness h(small_config(16, 4));
  const SeqId a = h.submit(ids_from(10, 10), 3);
  std::optional<StepPlan> first = h.step();
  ASSERT_TRUE(first.has_value());
  const std::vector<int32_t> a_pages = first->sequences[0].page_table;
  h.run_to_end();
  EXPECT_EQ(h.output(a), h.expected(a));
  SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.free_pages + s.cached_pages, 16);
  EXPECT_EQ(s.cached_pages, 3);  // 12 positions computed (10 prompt + 2 fed back)

  // B shares 8 tokens (two full pages), then differs at the first token of the third page.
  const SeqId b = h.submit(concat(ids_from(10, 8), ids_from(500, 5)), 2);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start_pos, 8);
  EXPECT_EQ(sb->tokens, ids_from(500, 5));
  EXPECT_EQ(sb->history_prefix, ids_from(10, 8));
  ASSERT_GE(sb->page_table.size(), 2u);
  EXPECT_EQ(sb->page_table[0], a_pages[0]);
  EXPECT_EQ(sb->page_table[1], a_pages[1]);
  EXPECT_TRUE(plan->page_copies.empty());
  s = h.scheduler().stats();
  EXPECT_EQ(s.prompt_tokens_reused, 8);
  // Pages 0 and 1 (B and the cache), and B's pages 2 and 3 (B and the cache: the step computed them).
  EXPECT_EQ(s.shared_pages, 4);
  h.run_to_end();
  EXPECT_EQ(h.output(b), h.expected(b));
  s = h.scheduler().stats();
  EXPECT_EQ(s.prompt_tokens_computed, 10 + 5);
  EXPECT_EQ(s.free_pages + s.cached_pages, 16);
  EXPECT_EQ(s.shared_pages, 0);
}

TEST(PrefixCache, CopiesThePartiallyMatchingPage) {
  Harness h(small_config(16, 4));
  h.submit(ids_from(10, 12), 2);
  std::optional<StepPlan> first = h.step();
  ASSERT_TRUE(first.has_value());
  const std::vector<int32_t> a_pages = first->sequences[0].page_table;
  h.run_to_end();
  // B: 10 common tokens, so page 2 (positions 8..11) shares its first 2 tokens with A's.
  const SeqId b = h.submit(concat(ids_from(10, 10), {900, 901, 902}), 2);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start_pos, 10);
  EXPECT_EQ(sb->tokens, (std::vector<int32_t>{900, 901, 902}));
  ASSERT_EQ(plan->page_copies.size(), 1u);
  EXPECT_EQ(plan->page_copies[0].src, a_pages[2]);
  EXPECT_EQ(plan->page_copies[0].dst, sb->page_table[2]);
  EXPECT_NE(sb->page_table[2], a_pages[2]) << "the differing page is never shared";
  EXPECT_EQ(sb->page_table[0], a_pages[0]);
  EXPECT_EQ(sb->page_table[1], a_pages[1]);
  h.run_to_end();
  EXPECT_EQ(h.output(b), h.expected(b));
  EXPECT_EQ(h.scheduler().stats().prompt_tokens_reused, 10);
}

TEST(PrefixCache, SamePromptTwiceComputesOnlyTheLastToken) {
  Harness h(small_config(16, 4));
  const std::vector<int32_t> prompt = ids_from(40, 8);
  const SeqId a = h.submit(prompt, 4, 5);
  h.run_to_end();
  const SeqId b = h.submit(prompt, 4, 5);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  // Page 0 shared; page 1 holds the last prompt token, so it is copied (3 of its 4 positions).
  EXPECT_EQ(sb->start_pos, 7);
  EXPECT_EQ(sb->tokens, (std::vector<int32_t>{47}));
  EXPECT_TRUE(sb->sample);
  EXPECT_EQ(plan->page_copies.size(), 1u);
  h.run_to_end();
  EXPECT_EQ(h.output(b), h.output(a));
  EXPECT_EQ(h.output(b), h.expected(b));
  const SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.prompt_tokens_computed, 8 + 1);
  EXPECT_EQ(s.prompt_tokens_reused, 7);
}

TEST(PrefixCache, PromptShorterThanAPage) {
  Harness h(small_config(8, 16));
  const SeqId a = h.submit({5, 6, 7}, 2);
  h.run_to_end();
  const SeqId b = h.submit({5, 6, 7}, 2);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start_pos, 2);
  EXPECT_EQ(sb->tokens, (std::vector<int32_t>{7}));
  EXPECT_EQ(sb->history_prefix, (std::vector<int32_t>{5, 6}));
  ASSERT_EQ(plan->page_copies.size(), 1u);
  h.run_to_end();
  EXPECT_EQ(h.output(b), h.output(a));
  // A one-token prompt never reuses anything: its only token is the one sampled from.
  const SeqId c = h.submit({5}, 2);
  plan = h.step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(find_seq(*plan, c)->start_pos, 0);
  EXPECT_TRUE(plan->page_copies.empty());
  h.run_to_end();
}

TEST(PrefixCache, NeverReusesTheLastPromptTokenOnAPageBoundary) {
  Harness h(small_config(16, 4));
  const std::vector<int32_t> prompt = ids_from(100, 12);  // exactly three pages
  h.submit(prompt, 3);
  h.run_to_end();
  const SeqId b = h.submit(prompt, 3);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start_pos, 11);
  EXPECT_EQ(sb->tokens, (std::vector<int32_t>{111}));
  // Pages 0 and 1 shared; page 2 (which the sequence writes position 11 into) is a copy.
  ASSERT_EQ(plan->page_copies.size(), 1u);
  EXPECT_EQ(plan->page_copies[0].dst, sb->page_table[2]);
  h.run_to_end();
  EXPECT_EQ(h.output(b), h.expected(b));
}

// Cached chains are evicted least recently used first, the tail of a chain before its head, and
// only when an allocation needs the pages.
TEST(PrefixCache, EvictsLeastRecentlyUsedUnderPressure) {
  Harness h(small_config(10, 4, /*max_batch=*/1));
  const std::vector<int32_t> p1 = ids_from(100, 8), p2 = ids_from(200, 8), p3 = ids_from(300, 8);
  for (const auto& p : {p1, p2, p3}) {
    h.submit(p, 1);
    h.run_to_end();
  }
  SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.cached_pages, 6);
  EXPECT_EQ(s.free_pages, 4);
  // Use p1 again (a hit), so p2 is now the least recently used chain.
  h.submit(concat(p1, {7}), 1);
  h.run_to_end();
  EXPECT_EQ(h.scheduler().stats().prompt_tokens_reused, 8);
  // 3 free pages now (p1's request cached a third page); a request of 5 pages evicts 2: both of
  // p2's, the least recently used chain.
  s = h.scheduler().stats();
  EXPECT_EQ(s.free_pages, 3);
  EXPECT_EQ(s.cached_pages, 7);
  const SeqId big = h.submit(ids_from(600, 20), 1);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(find_seq(*plan, big)->page_table.size(), 5u);
  h.run_to_end();
  s = h.scheduler().stats();
  EXPECT_EQ(s.free_pages, 0);
  EXPECT_EQ(s.cached_pages, 10);
  // p2 is gone, p3 is still whole.
  const int64_t reused_before = h.scheduler().stats().prompt_tokens_reused;
  h.submit(concat(p3, {9}), 1);
  h.run_to_end();
  EXPECT_EQ(h.scheduler().stats().prompt_tokens_reused - reused_before, 8) << "p3 was evicted";
  h.submit(concat(p2, {9}), 1);
  h.run_to_end();
  EXPECT_EQ(h.scheduler().stats().prompt_tokens_reused - reused_before, 8) << "p2 survived eviction";
}

TEST(PrefixCache, PreemptionKeepsSharedPagesWithTheirOtherHolder) {
  // 8 pages of 4: A and B share a 12-token prefix (3 pages); growth preempts B, the newest.
  SchedulerConfig c = small_config(8, 4, /*max_batch=*/2);
  Harness h(c);
  const std::vector<int32_t> prefix = ids_from(50, 12);
  const SeqId a = h.submit(concat(prefix, {1, 3}), 14);
  for (int i = 0; i < 2; ++i) h.step();  // A prefilled and decoding
  const SeqId b = h.submit(concat(prefix, {4, 5}), 14);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start_pos, 12);  // three pages shared; A's fourth page starts with another token
  EXPECT_TRUE(plan->page_copies.empty());
  // Pages 0..2 (A, B and the cache), A's page 3 and B's own page 3 (each with the cache: computed).
  EXPECT_EQ(h.scheduler().stats().shared_pages, 5);
  h.run_to_end();
  const SchedulerStats s = h.scheduler().stats();
  EXPECT_GT(s.preemptions, 0);
  EXPECT_EQ(h.output(a), h.expected(a));
  EXPECT_EQ(h.output(b), h.expected(b));
  EXPECT_EQ(s.free_pages + s.cached_pages, 8);
  EXPECT_EQ(s.shared_pages, 0);
}

// Requests arriving together behind a long common prompt: the second waits for the first to
// compute it, then reuses it.
TEST(PrefixCache, HeadWaitsForARunningSequencePrefillingItsPrefix) {
  SchedulerConfig c = small_config(64, 4);
  c.prefill_chunk = 8;
  c.max_step_tokens = 16;
  Harness h(c);
  const std::vector<int32_t> system = ids_from(200, 30);
  std::vector<SeqId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(h.submit(concat(system, {700 + i, 710 + i}), 3, 10 + i));
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->sequences.size(), 1u) << "the others wait for the first to prefill the shared prompt";
  h.run_to_end();
  for (const SeqId id : ids) EXPECT_EQ(h.output(id), h.expected(id));
  const SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.prompt_tokens_computed, 32 + 3 * 2);
  EXPECT_EQ(s.prompt_tokens_reused, 3 * 30);
}

TEST(PrefixCache, DisabledKeepsNothing) {
  SchedulerConfig c = small_config(16, 4);
  c.prefix_cache = false;
  Harness h(c);
  const std::vector<int32_t> prompt = ids_from(10, 9);
  h.submit(prompt, 2);
  h.run_to_end();
  const SeqId b = h.submit(prompt, 2);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(find_seq(*plan, b)->start_pos, 0);
  EXPECT_TRUE(plan->page_copies.empty());
  h.run_to_end();
  const SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.free_pages, 16);
  EXPECT_EQ(s.cached_pages, 0);
  EXPECT_EQ(s.prompt_tokens_reused, 0);
  EXPECT_EQ(s.prompt_tokens_computed, 18);
}

// ---- Randomized mixed traffic ------------------------------------------------------------------

class MixedTraffic : public testing::RandomTraffic {
 public:
  MixedTraffic(SchedulerConfig c, uint64_t seed)
      : RandomTraffic(c, seed, kVocab, /*context=*/90, kEos, /*guard_limit=*/100000), worker_(c, truth_) {}

  int64_t finished() const { return finished_; }
  int64_t ended_by_caller() const { return ended_by_caller_; }
  size_t live() const { return outputs_.size(); }
  int64_t copies() const { return copies_; }
  int32_t most_shared() const { return most_shared_; }

 private:
  testing::PagedKvWorker& worker() override { return worker_; }

  void before_step(const StepPlan& plan) override { copies_ += static_cast<int64_t>(plan.page_copies.size()); }
  void after_step() override { most_shared_ = std::max(most_shared_, scheduler_.stats().shared_pages); }

  void on_submitted(SeqId id, const ValidatedRequest& request, const testing::RandomRequest&) override {
    truth_.emplace(id, Truth{request, 30});
    outputs_[id] = {};
  }

  void maybe_end(double probability) override {
    if (end_at_random(outputs_, probability)) ++ended_by_caller_;
  }

  void apply(const SequenceUpdate& u) override {
    auto it = outputs_.find(u.seq_id);
    ASSERT_NE(it, outputs_.end()) << "update for ended sequence " << u.seq_id;
    it->second.insert(it->second.end(), u.new_tokens.begin(), u.new_tokens.end());
    const Truth& truth = truth_.at(u.seq_id);
    const int32_t prompt_len = static_cast<int32_t>(truth.request.prompt_ids.size());
    for (size_t i = 0; i < it->second.size(); ++i) {
      ASSERT_EQ(it->second[i], truth.token_at(prompt_len + static_cast<int32_t>(i))) << "sequence " << u.seq_id;
    }
    if (u.finish_reason.has_value()) {
      outputs_.erase(it);
      ++finished_;
    }
  }

  std::map<SeqId, Truth> truth_;
  FakeWorker worker_;
  std::map<SeqId, std::vector<int32_t>> outputs_;
  int64_t finished_ = 0;
  int64_t ended_by_caller_ = 0;
  int64_t copies_ = 0;
  int32_t most_shared_ = 0;
};

void run_mixed(int32_t decode_steps, uint64_t seed) {
  MixedTraffic sim(testing::random_traffic_config(decode_steps, true), seed);
  sim.run(1000);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const SchedulerStats s = sim.scheduler().stats();
  EXPECT_EQ(sim.submitted(), 1000);
  EXPECT_EQ(sim.live(), 0u);
  testing::expect_drained(sim.scheduler());
  EXPECT_GT(s.preemptions, 0);
  EXPECT_GT(sim.ended_by_caller(), 10);
  EXPECT_GT(sim.copies(), 50);
  EXPECT_GT(sim.most_shared(), 2);
  EXPECT_GT(s.prompt_tokens_reused, s.prompt_tokens / 4);
  std::printf(
      "decode_steps %d: %lld steps, %lld finished, %lld ended by caller, %lld preemptions, %lld page copies, "
      "prompt tokens %lld: %lld computed, %lld reused; most shared pages %d; at the end %d free + %d cached\n",
      decode_steps, static_cast<long long>(s.steps), static_cast<long long>(sim.finished()),
      static_cast<long long>(sim.ended_by_caller()), static_cast<long long>(s.preemptions),
      static_cast<long long>(sim.copies()), static_cast<long long>(s.prompt_tokens),
      static_cast<long long>(s.prompt_tokens_computed), static_cast<long long>(s.prompt_tokens_reused),
      sim.most_shared(), s.free_pages, s.cached_pages);
}

TEST(PrefixCache, ThousandMixedRequestsSingleStepDecode) { run_mixed(1, 20260101); }

TEST(PrefixCache, ThousandMixedRequestsMultiStepDecode) { run_mixed(3, 4242); }

}  // namespace
}  // namespace exl3
