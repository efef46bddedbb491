// Prefix reuse in the Scheduler (PrefixCache): hand cases (a full page shared, a partial page copied
// on write, LRU eviction under pressure, preemption with shared pages, the same prompt twice, a
// prompt shorter than a page, the last prompt token always computed, requests arriving together,
// reuse turned off) and a randomized run of 1,000 mixed requests drawn from a few shared prefixes,
// with cancellations, stop strings, EOS and preemption pressure, checking the invariants after every
// call and every page free or cached at the end.
//
// The fake worker keeps a real paged "KV cache": the slot of position p holds a fingerprint of the
// sequence's tokens [0, p], computed like attention would from the slot of p - 1 it reads through
// the page table. It applies page copies before a step, checks that every position before
// start_pos holds exactly the fingerprint of the sequence's own tokens (so a shared page, a copy or
// an eviction that went wrong is caught), that its token history (penalties) is the sequence's
// true prefix (history_prefix), and that no page written in a step appears in another sequence's
// page table of that step.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

constexpr int32_t kVocab = 1000;
constexpr int32_t kEos = 2;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// KV "value" at a position: a function of the previous position's value and this token.
uint64_t kv_value(uint64_t previous, int32_t token) { return mix(previous ^ mix(static_cast<uint64_t>(token) + 1)); }

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
  uint64_t kv_at(int32_t position) const {
    uint64_t v = 0;
    for (int32_t p = 0; p <= position; ++p) v = kv_value(v, token_at(p));
    return v;
  }
};

class FakeWorker {
 public:
  FakeWorker(const SchedulerConfig& c, const std::map<SeqId, Truth>& truth)
      : page_size_(c.page_size), slots_(static_cast<size_t>(c.num_pages) * c.page_size, 0), truth_(truth) {}

  StepOutcome run(const StepPlan& plan) {
    for (const SeqId id : plan.released) history_.erase(id);
    for (const PageCopy& copy : plan.page_copies) {
      EXPECT_NE(copy.src, copy.dst);
      std::copy_n(slots_.begin() + static_cast<size_t>(copy.src) * page_size_, page_size_,
                  slots_.begin() + static_cast<size_t>(copy.dst) * page_size_);
    }
    // Pages each sequence writes in this step: none may be in another sequence's table.
    std::map<int32_t, SeqId> written;
    for (const SequencePlan& seq : plan.sequences) {
      const int32_t last = seq.start_pos + static_cast<int32_t>(seq.tokens.size()) + (seq.sample ? plan.decode_steps - 1 : 0);
      for (int32_t p = seq.start_pos; p < last; ++p) written[seq.page_table.at(p / page_size_)] = seq.seq_id;
    }
    for (const SequencePlan& seq : plan.sequences) {
      for (const int32_t page : seq.page_table) {
        auto it = written.find(page);
        EXPECT_TRUE(it == written.end() || it->second == seq.seq_id)
            << "page " << page << " of sequence " << seq.seq_id << " is written by sequence " << it->second;
      }
    }
    StepOutcome outcome;
    outcome.step_id = plan.step_id;
    for (const SequencePlan& seq : plan.sequences) run_sequence(plan, seq, outcome);
    return outcome;
  }

 private:
  void run_sequence(const StepPlan& plan, const SequencePlan& seq, StepOutcome& outcome) {
    const Truth& truth = truth_.at(seq.seq_id);
    EXPECT_EQ(seq.prompt_len, static_cast<int32_t>(truth.request.prompt_ids.size()));
    auto h = history_.find(seq.seq_id);
    if (h == history_.end()) {
      EXPECT_EQ(static_cast<int32_t>(seq.history_prefix.size()), seq.start_pos)
          << "sequence " << seq.seq_id << " starts at " << seq.start_pos << " without its history";
      h = history_.emplace(seq.seq_id, seq.history_prefix).first;
    } else {
      // Like the engine: the history ends with the last sampled token, which this chunk feeds.
      EXPECT_TRUE(seq.history_prefix.empty()) << "sequence " << seq.seq_id << ": history prefix on a later chunk";
      EXPECT_GE(static_cast<int32_t>(h->second.size()), seq.start_pos) << "sequence " << seq.seq_id;
      h->second.resize(seq.start_pos);
    }
    std::vector<int32_t>& history = h->second;
    for (int32_t p = 0; p < static_cast<int32_t>(history.size()); ++p) {
      EXPECT_EQ(history[p], truth.token_at(p)) << "history of sequence " << seq.seq_id << " at " << p;
    }
    // Everything before start_pos must hold this sequence's own KV.
    for (int32_t p = 0; p < seq.start_pos; ++p) {
      ASSERT_EQ(slots_[slot(seq, p)], truth.kv_at(p))
          << "KV of sequence " << seq.seq_id << " at position " << p << " (page " << seq.page_table[p / page_size_]
          << ") is not its own";
    }
    int32_t position = seq.start_pos;
    auto feed = [&](int32_t token) {
      EXPECT_EQ(token, truth.token_at(position)) << "sequence " << seq.seq_id << " at " << position;
      const uint64_t previous = position == 0 ? 0 : slots_[slot(seq, position - 1)];
      slots_[slot(seq, position)] = kv_value(previous, token);
      history.push_back(token);
      ++position;
    };
    for (const int32_t token : seq.tokens) feed(token);
    if (!seq.sample) return;
    SequenceResult result{seq.seq_id, {}};
    for (int32_t i = 0; i < plan.decode_steps; ++i) {
      const int32_t token = sampled_token(truth.request.sampling.seed, position, truth.eos_every);
      result.token_ids.push_back(token);
      if (i + 1 < plan.decode_steps) {
        feed(token);
      } else {
        history.push_back(token);
      }
    }
    outcome.sequences.push_back(std::move(result));
  }

  size_t slot(const SequencePlan& seq, int32_t position) const {
    const size_t logical = static_cast<size_t>(position / page_size_);
    EXPECT_LT(logical, seq.page_table.size()) << "sequence " << seq.seq_id << " position " << position;
    if (logical >= seq.page_table.size()) return 0;
    return static_cast<size_t>(seq.page_table[logical]) * page_size_ + position % page_size_;
  }

  int32_t page_size_;
  std::vector<uint64_t> slots_;
  const std::map<SeqId, Truth>& truth_;
  std::map<SeqId, std::vector<int32_t>> history_;  // the worker's token history per live sequence
};

SchedulerConfig small_config(int32_t num_pages, int32_t page_size, int32_t max_batch = 8) {
  SchedulerConfig c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.max_batch = max_batch;
  c.max_step_tokens = 64;
  c.prefill_chunk = 64;
  c.max_queue = 64;
  c.decode_steps = 1;
  c.prefix_cache = true;
  return c;
}

// A scheduler, the fake worker and the truth of every request; steps run end to end with the
// invariants checked on both sides.
class Harness {
 public:
  explicit Harness(SchedulerConfig c) : config_(c), scheduler_(c), worker_(c, truth_) {}

  SeqId submit(const std::vector<int32_t>& prompt, int32_t max_new_tokens, uint64_t seed = 1) {
    GenerateParams params;
    params.prompt = prompt;
    params.stopping.max_new_tokens = max_new_tokens;
    params.stopping.ignore_eos = true;
    params.sampling.seed = seed;
    auto request = validate_request(params, ModelLimits{kVocab, 4096, {kEos}}, prompt, 0);
    EXPECT_TRUE(request.ok()) << request.status();
    auto id = scheduler_.submit(*request);
    EXPECT_TRUE(id.ok()) << id.status();
    truth_.emplace(*id, Truth{*request, 0});
    return *id;
  }

  // One step; nullopt when nothing ran.
  std::optional<StepPlan> step() {
    std::optional<StepPlan> plan = scheduler_.next_step();
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    if (!plan.has_value()) return std::nullopt;
    const StepOutcome outcome = worker_.run(*plan);
    auto updates = scheduler_.complete_step(outcome);
    EXPECT_TRUE(updates.ok()) << updates.status();
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    if (updates.ok()) {
      for (const SequenceUpdate& u : *updates) {
        auto& out = outputs_[u.seq_id];
        out.insert(out.end(), u.new_tokens.begin(), u.new_tokens.end());
      }
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
  SchedulerConfig config_;
  std::map<SeqId, Truth> truth_;
  Scheduler scheduler_;
  FakeWorker worker_;
  std::map<SeqId, std::vector<int32_t>> outputs_;
};

std::vector<int32_t> ids_from(int32_t first, int32_t count) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back(first + i);
  return ids;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const SequencePlan* find_seq(const StepPlan& plan, SeqId id) {
  for (const SequencePlan& seq : plan.sequences) {
    if (seq.seq_id == id) return &seq;
  }
  return nullptr;
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

class MixedTraffic {
 public:
  MixedTraffic(SchedulerConfig c, uint64_t seed) : config_(c), scheduler_(c), worker_(c, truth_), rng_(seed) {
    for (const int32_t len : {7, 18, 33}) {
      std::vector<int32_t> p(len);
      for (int32_t& t : p) t = uniform(3, kVocab - 1);
      prefixes_.push_back(p);
    }
  }

  void run(int32_t requests) {
    int guard = 0;
    while (submitted_ < requests && ++guard < 100000) {
      maybe_submit();
      maybe_end(0.02);
      if (!step()) return;
    }
    for (int i = 0; i < 100000 && !scheduler_.idle(); ++i) {
      if (!step()) return;
    }
  }

  const Scheduler& scheduler() const { return scheduler_; }
  int32_t submitted() const { return submitted_; }
  int64_t finished() const { return finished_; }
  int64_t ended_by_caller() const { return ended_by_caller_; }
  size_t live() const { return outputs_.size(); }
  int64_t copies() const { return copies_; }
  int32_t most_shared() const { return most_shared_; }

 private:
  int32_t uniform(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }
  double coin() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

  bool step() {
    std::optional<StepPlan> plan = scheduler_.next_step();
    if (!check()) return false;
    if (!plan.has_value()) return true;
    copies_ += static_cast<int64_t>(plan->page_copies.size());
    const StepOutcome outcome = worker_.run(*plan);
    if (testing::Test::HasFatalFailure()) return false;
    maybe_end(0.03);  // cancellations and stop strings while the step runs
    auto updates = scheduler_.complete_step(outcome);
    EXPECT_TRUE(updates.ok()) << updates.status();
    if (!updates.ok() || !check()) return false;
    most_shared_ = std::max(most_shared_, scheduler_.stats().shared_pages);
    for (const SequenceUpdate& u : *updates) apply(u);
    return !testing::Test::HasFailure();
  }

  bool check() {
    const absl::Status s = scheduler_.check_invariants();
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }

  void maybe_submit() {
    if (coin() > 0.6) return;
    std::vector<int32_t> prompt;
    const double kind = coin();
    if (kind < 0.85) {
      // A shared prefix, sometimes cut short, then a random suffix.
      const std::vector<int32_t>& p = prefixes_[uniform(0, static_cast<int32_t>(prefixes_.size()) - 1)];
      const int32_t keep = coin() < 0.7 ? static_cast<int32_t>(p.size()) : uniform(1, static_cast<int32_t>(p.size()));
      prompt.assign(p.begin(), p.begin() + keep);
      const int32_t suffix = uniform(0, 12);
      for (int32_t i = 0; i < suffix; ++i) prompt.push_back(uniform(3, kVocab - 1));
    } else {
      const int32_t len = uniform(1, 40);
      for (int32_t i = 0; i < len; ++i) prompt.push_back(uniform(3, kVocab - 1));
    }
    GenerateParams params;
    params.prompt = prompt;
    const int32_t context = 90;
    params.stopping.max_new_tokens = uniform(1, std::min(40, context - static_cast<int32_t>(prompt.size())));
    if (coin() < 0.3) params.stopping.ignore_eos = true;
    params.sampling.seed = coin() < 0.3 ? 12345 : rng_();  // the same seed: identical continuations
    auto request = validate_request(params, ModelLimits{kVocab, context, {kEos}}, prompt, 0);
    ASSERT_TRUE(request.ok()) << request.status();
    auto id = scheduler_.submit(*request);
    if (!id.ok()) {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
      return;
    }
    ++submitted_;
    truth_.emplace(*id, Truth{*request, 30});
    outputs_[*id] = {};
  }

  void maybe_end(double probability) {
    if (outputs_.empty() || coin() > probability) return;
    auto it = outputs_.begin();
    std::advance(it, uniform(0, static_cast<int32_t>(outputs_.size()) - 1));
    const SeqId id = it->first;
    const absl::Status status = coin() < 0.5 ? scheduler_.cancel(id) : scheduler_.finish(id, FinishReason::kStopString);
    ASSERT_TRUE(status.ok()) << status;
    outputs_.erase(it);
    ++ended_by_caller_;
  }

  void apply(const SequenceUpdate& u) {
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

  SchedulerConfig config_;
  std::map<SeqId, Truth> truth_;
  Scheduler scheduler_;
  FakeWorker worker_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int32_t>> prefixes_;
  std::map<SeqId, std::vector<int32_t>> outputs_;
  int32_t submitted_ = 0;
  int64_t finished_ = 0;
  int64_t ended_by_caller_ = 0;
  int64_t copies_ = 0;
  int32_t most_shared_ = 0;
};

void run_mixed(int32_t decode_steps, uint64_t seed) {
  SchedulerConfig c;
  // 120 positions: a 90-token context fits alone, a few running sequences fill the cache.
  c.num_pages = 30;
  c.page_size = 4;
  c.max_batch = 6;
  c.max_step_tokens = 40;
  c.prefill_chunk = 16;
  c.max_queue = 10;
  c.decode_steps = decode_steps;
  c.prefix_cache = true;
  MixedTraffic sim(c, seed);
  sim.run(1000);
  ASSERT_FALSE(testing::Test::HasFailure());
  const SchedulerStats s = sim.scheduler().stats();
  EXPECT_EQ(sim.submitted(), 1000);
  EXPECT_TRUE(sim.scheduler().idle());
  EXPECT_EQ(sim.live(), 0u);
  EXPECT_EQ(s.free_pages + s.cached_pages, c.num_pages) << "pages leaked";
  EXPECT_EQ(s.shared_pages, 0);
  EXPECT_EQ(s.completed + s.cancelled, s.submitted);
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
