// Scheduler::rewind (banned strings): hand cases (truncation, the last kept token run again, bans
// at the first draw only and accumulating per position, errors, the rewind limit, bans that would
// leave no token, copy-on-write of an indexed page whose original stays cached and intact) and a
// randomized run of mixed requests with random rewinds, preemption pressure, cancellations and
// prefix reuse on and off, with the invariants checked after every call and every page free or
// cached at the end.
//
// The fake worker keeps a paged "KV cache" like prefix_cache_test.cpp's: the slot of position p
// holds a fingerprint of the sequence's tokens [0, p], computed from the slot of p - 1 read through
// the page table. It keeps each sequence's token history as the engine does (history_prefix on a
// first chunk, truncated to start_pos on later ones), checks that every position before start_pos
// holds the fingerprint of that history (so a rewind that wrote a shared or cached page, or lost a
// copy, is caught when another sequence reads it), and samples a pure function of (seed, position,
// the ids banned at that draw): banned_now only at a step's first draw.
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

uint64_t kv_value(uint64_t previous, int32_t token) { return mix(previous ^ mix(static_cast<uint64_t>(token) + 1)); }

// The draw at `position`: the first of a seeded series of candidates that is not banned. EOS about
// once in `eos_every` candidates (0 = never). `vocab` ids from 0 (small vocabularies test the
// "no token left" refusal).
int32_t draw(uint64_t seed, int32_t position, const std::vector<int32_t>& banned, int eos_every, int32_t vocab) {
  for (uint64_t k = 0;; ++k) {
    const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(position) * 1000003u + k));
    int32_t t = eos_every > 0 && h % eos_every == 0 ? kEos : static_cast<int32_t>(3 + h % (vocab - 3));
    if (vocab < 8) t = static_cast<int32_t>(h % vocab);
    if (!std::binary_search(banned.begin(), banned.end(), t)) return t;
  }
}

struct Request {
  uint64_t seed = 0;
  int eos_every = 0;
  int32_t vocab = kVocab;
  std::vector<int32_t> always_banned;  // sampling.banned_ids
};

class FakeWorker {
 public:
  FakeWorker(const SchedulerConfig& c, const std::map<SeqId, Request>& requests)
      : page_size_(c.page_size), slots_(static_cast<size_t>(c.num_pages) * c.page_size, 0), requests_(requests) {}

  StepOutcome run(const StepPlan& plan) {
    for (const SeqId id : plan.released) history_.erase(id);
    for (const PageCopy& copy : plan.page_copies) {
      EXPECT_NE(copy.src, copy.dst);
      std::copy_n(slots_.begin() + static_cast<size_t>(copy.src) * page_size_, page_size_,
                  slots_.begin() + static_cast<size_t>(copy.dst) * page_size_);
    }
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

  const std::vector<int32_t>& history(SeqId id) { return history_[id]; }

 private:
  void run_sequence(const StepPlan& plan, const SequencePlan& seq, StepOutcome& outcome) {
    const Request& request = requests_.at(seq.seq_id);
    auto h = history_.find(seq.seq_id);
    if (h == history_.end()) {
      EXPECT_EQ(static_cast<int32_t>(seq.history_prefix.size()), seq.start_pos) << "sequence " << seq.seq_id;
      h = history_.emplace(seq.seq_id, seq.history_prefix).first;
    } else {
      EXPECT_TRUE(seq.history_prefix.empty()) << "sequence " << seq.seq_id;
      EXPECT_GE(static_cast<int32_t>(h->second.size()), seq.start_pos) << "sequence " << seq.seq_id;
      h->second.resize(seq.start_pos);  // a rewind (or a recompute) continues below the history
    }
    std::vector<int32_t>& history = h->second;
    uint64_t expected = 0;
    for (int32_t p = 0; p < seq.start_pos; ++p) {
      expected = kv_value(expected, history[p]);
      ASSERT_EQ(slots_[slot(seq, p)], expected)
          << "KV of sequence " << seq.seq_id << " at position " << p << " (page " << seq.page_table[p / page_size_]
          << ") is not its own";
    }
    int32_t position = seq.start_pos;
    auto feed = [&](int32_t token) {
      const uint64_t previous = position == 0 ? 0 : slots_[slot(seq, position - 1)];
      slots_[slot(seq, position)] = kv_value(previous, token);
      history.push_back(token);
      ++position;
    };
    for (const int32_t token : seq.tokens) feed(token);
    EXPECT_TRUE(seq.sample || seq.banned_now.empty()) << "bans on a chunk that does not sample";
    if (!seq.sample) return;
    SequenceResult result{seq.seq_id, {}};
    for (int32_t i = 0; i < plan.decode_steps; ++i) {
      std::vector<int32_t> banned = request.always_banned;
      if (i == 0) {
        banned.insert(banned.end(), seq.banned_now.begin(), seq.banned_now.end());
        std::sort(banned.begin(), banned.end());
      }
      const int32_t token = draw(request.seed, position, banned, request.eos_every, request.vocab);
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
  const std::map<SeqId, Request>& requests_;
  std::map<SeqId, std::vector<int32_t>> history_;
};

SchedulerConfig small_config(int32_t num_pages, int32_t page_size, bool prefix_cache, int32_t decode_steps = 1) {
  SchedulerConfig c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.max_batch = 8;
  c.max_step_tokens = 64;
  c.prefill_chunk = 64;
  c.max_queue = 64;
  c.decode_steps = decode_steps;
  c.prefix_cache = prefix_cache;
  return c;
}

class Harness {
 public:
  explicit Harness(SchedulerConfig c) : scheduler_(c), worker_(c, requests_) {}

  SeqId submit(const std::vector<int32_t>& prompt, int32_t max_new_tokens, uint64_t seed,
               const ModelLimits& limits = ModelLimits{kVocab, 4096, {kEos}}, std::vector<int32_t> banned = {}) {
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
    std::sort(banned.begin(), banned.end());
    requests_[*id] = Request{seed, 0, limits.vocab_size, banned};
    return *id;
  }

  std::optional<StepPlan> step() {
    std::optional<StepPlan> plan = scheduler_.next_step();
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    if (!plan.has_value()) return std::nullopt;
    const StepOutcome outcome = worker_.run(*plan);
    auto updates = scheduler_.complete_step(outcome);
    EXPECT_TRUE(updates.ok()) << updates.status();
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    return plan;
  }

  // Rewinds `id` to `keep` output tokens, banning the token it had there; checks the invariants.
  absl::Status rewind(SeqId id, int32_t keep) {
    const std::vector<int32_t> out = scheduler_.output_tokens(id);
    EXPECT_LT(keep, static_cast<int32_t>(out.size()));
    const absl::Status s = scheduler_.rewind(id, keep, out.at(keep));
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    return s;
  }

  void run_to_end(int max_steps = 1000) {
    for (int i = 0; i < max_steps && !scheduler_.idle(); ++i) {
      if (!step().has_value()) break;
    }
    EXPECT_TRUE(scheduler_.idle());
  }

  Scheduler& scheduler() { return scheduler_; }
  FakeWorker& worker() { return worker_; }

 private:
  std::map<SeqId, Request> requests_;
  Scheduler scheduler_;
  FakeWorker worker_;
};

std::vector<int32_t> ids_from(int32_t first, int32_t count) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back(first + i);
  return ids;
}

const SequencePlan* find_seq(const StepPlan& plan, SeqId id) {
  for (const SequencePlan& seq : plan.sequences) {
    if (seq.seq_id == id) return &seq;
  }
  return nullptr;
}

TEST(SchedulerRewind, TruncatesRunsTheLastKeptTokenAgainAndBansAtTheFirstDraw) {
  Harness h(small_config(16, 4, /*prefix_cache=*/false));
  const SeqId a = h.submit(ids_from(10, 5), 20, 7);
  for (int i = 0; i < 6; ++i) h.step();
  std::vector<int32_t> out = h.scheduler().output_tokens(a);
  ASSERT_EQ(out.size(), 6u);

  EXPECT_EQ(h.scheduler().rewind(a, 2, out[2] + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.scheduler().rewind(a, 6, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.scheduler().rewind(a, -1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.scheduler().rewind(a + 1, 0, 0).code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(h.scheduler().output_tokens(a), out) << "a refused rewind changed the sequence";

  ASSERT_TRUE(h.rewind(a, 2).ok());
  EXPECT_EQ(h.scheduler().output_tokens(a), std::vector<int32_t>(out.begin(), out.begin() + 2));
  std::optional<SequenceInfo> info = h.scheduler().sequence_info(a);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->num_generated, 2);
  EXPECT_EQ(info->num_computed, 5 + 2 - 1);
  EXPECT_EQ(h.scheduler().stats().rewinds, 1);

  std::optional<StepPlan> plan = h.scheduler().next_step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(h.scheduler().rewind(a, 0, out[0]).code(), absl::StatusCode::kFailedPrecondition) << "step in flight";
  const SequencePlan* s = find_seq(*plan, a);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->start_pos, 6);
  EXPECT_EQ(s->tokens, std::vector<int32_t>{out[1]});
  EXPECT_TRUE(s->sample);
  EXPECT_EQ(s->banned_now, std::vector<int32_t>{out[2]});
  auto updates = h.scheduler().complete_step(h.worker().run(*plan));
  ASSERT_TRUE(updates.ok()) << updates.status();
  const int32_t second = h.scheduler().output_tokens(a).at(2);
  EXPECT_NE(second, out[2]);
  EXPECT_EQ(h.worker().history(a).size(), 8u);

  // Later positions draw without bans; the next rewind to the same position accumulates them.
  plan = h.step();
  EXPECT_TRUE(find_seq(*plan, a)->banned_now.empty());
  ASSERT_TRUE(h.rewind(a, 2).ok());
  plan = h.step();
  std::vector<int32_t> both = {out[2], second};
  std::sort(both.begin(), both.end());
  EXPECT_EQ(find_seq(*plan, a)->banned_now, both);
  const int32_t third = h.scheduler().output_tokens(a).at(2);
  EXPECT_TRUE(third != out[2] && third != second);
  // A rewind to an earlier position drops the bans of later ones (their prefix changed).
  h.step();
  ASSERT_TRUE(h.rewind(a, 1).ok());
  plan = h.step();
  EXPECT_EQ(find_seq(*plan, a)->banned_now, std::vector<int32_t>{out[1]});
  h.step();
  plan = h.step();
  ASSERT_NE(find_seq(*plan, a), nullptr);
  EXPECT_EQ(find_seq(*plan, a)->start_pos, 5 + 2);
  EXPECT_TRUE(find_seq(*plan, a)->banned_now.empty()) << "the bans of position 2 were dropped";
  h.run_to_end();
  EXPECT_EQ(h.scheduler().stats().free_pages, 16);
  EXPECT_EQ(h.scheduler().rewind(a, 0, 0).code(), absl::StatusCode::kNotFound) << "a finished sequence";
}

TEST(SchedulerRewind, MultiStepDecodeBansOnlyTheFirstDraw) {
  Harness h(small_config(16, 4, /*prefix_cache=*/false, /*decode_steps=*/4));
  const SeqId a = h.submit(ids_from(10, 3), 30, 3);
  for (int i = 0; i < 3; ++i) h.step();
  const std::vector<int32_t> out = h.scheduler().output_tokens(a);
  ASSERT_GE(out.size(), 6u);
  ASSERT_TRUE(h.rewind(a, 4).ok());
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->decode_steps, 4);
  EXPECT_EQ(find_seq(*plan, a)->banned_now, std::vector<int32_t>{out[4]});
  const std::vector<int32_t> now = h.scheduler().output_tokens(a);
  ASSERT_EQ(now.size(), 8u);
  EXPECT_NE(now[4], out[4]);
  EXPECT_EQ(h.worker().history(a), [&] {
    std::vector<int32_t> all = ids_from(10, 3);
    all.insert(all.end(), now.begin(), now.end());
    return all;
  }());
  h.run_to_end();
}

TEST(SchedulerRewind, RefusesPastTheLimitAndWhenNoTokenWouldBeLeft) {
  Harness h(small_config(16, 4, /*prefix_cache=*/false));
  const SeqId a = h.submit(ids_from(10, 3), 10, 11);
  h.step();
  for (int i = 0; i < kMaxRewinds; ++i) {
    ASSERT_TRUE(h.rewind(a, 0).ok()) << "rewind " << i;
    h.step();
  }
  EXPECT_EQ(h.rewind(a, 0).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(h.scheduler().stats().rewinds, kMaxRewinds);
  EXPECT_EQ(h.scheduler().output_tokens(a).size(), 1u);
  ASSERT_TRUE(h.scheduler().cancel(a).ok());

  // A vocabulary of 6 with id 0 banned for the whole request: 5 tokens may be drawn at position 0;
  // banning 4 of them there is fine, the fifth would leave none.
  const SeqId b = h.submit({1, 2}, 5, 3, ModelLimits{6, 64, {kEos}}, {0});
  h.step();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(h.rewind(b, 0).ok()) << "ban " << i;
    std::optional<StepPlan> plan = h.step();
    EXPECT_EQ(find_seq(*plan, b)->banned_now.size(), static_cast<size_t>(i + 1));
  }
  const std::vector<int32_t> before = h.scheduler().output_tokens(b);
  EXPECT_EQ(h.rewind(b, 0).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(h.scheduler().output_tokens(b), before);
  h.run_to_end();
  EXPECT_EQ(h.scheduler().stats().free_pages, 16);
}

// The page holding the rewind point is indexed (its computed positions were recorded): the
// sequence writes a private copy, the original stays cached with its old tokens, and a later
// request with those tokens reuses it intact (the fake worker checks every reused position).
TEST(SchedulerRewind, CopiesAnIndexedPageAndLeavesTheOriginalIntact) {
  Harness h(small_config(16, 4, /*prefix_cache=*/true));
  const std::vector<int32_t> prompt = ids_from(10, 6);
  const SeqId a = h.submit(prompt, 12, 5);
  std::optional<StepPlan> first = h.step();
  for (int i = 0; i < 7; ++i) h.step();
  const std::vector<int32_t> out = h.scheduler().output_tokens(a);
  ASSERT_EQ(out.size(), 8u);  // 14 tokens, 13 computed: pages 0-2 full, page 3 partial
  const std::vector<int32_t> pages_before = h.step()->sequences[0].page_table;  // 9 outputs, 14 computed
  ASSERT_GE(pages_before.size(), 4u);
  ASSERT_TRUE(h.rewind(a, 1).ok());  // 7 tokens kept, position 6 (page 1) is written again
  const SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.rewind_page_copies, 1);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sa = find_seq(*plan, a);
  ASSERT_NE(sa, nullptr);
  EXPECT_EQ(sa->start_pos, 6);
  ASSERT_EQ(plan->page_copies.size(), 1u);
  EXPECT_EQ(plan->page_copies[0].src, pages_before[1]);
  EXPECT_EQ(plan->page_copies[0].dst, sa->page_table[1]);
  EXPECT_NE(sa->page_table[1], pages_before[1]);
  EXPECT_EQ(sa->page_table[0], pages_before[0]) << "a page before the rewind point is kept";
  for (size_t k = 2; k < sa->page_table.size(); ++k) {
    EXPECT_TRUE(std::find(pages_before.begin() + 1, pages_before.end(), sa->page_table[k]) == pages_before.end())
        << "an indexed page after the rewind point is written again";
  }

  // B carries A's original tokens: pages 0-2 (12 positions) come from the cache, pages 1 and 2 the
  // originals A gave back.
  std::vector<int32_t> original = prompt;
  original.insert(original.end(), out.begin(), out.end());
  const SeqId b = h.submit(original, 2, 99);
  plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start_pos, 13);
  ASSERT_GE(sb->page_table.size(), 3u);
  EXPECT_EQ(sb->page_table[1], pages_before[1]);
  EXPECT_EQ(sb->page_table[2], pages_before[2]);
  h.run_to_end();
  const SchedulerStats end = h.scheduler().stats();
  EXPECT_EQ(end.free_pages + end.cached_pages, 16);
  EXPECT_EQ(end.shared_pages, 0);
}

// A sequence that ends (or is preempted) before its rewind copy ran: the copy is dropped and its
// source unpinned, so nothing stays referenced.
TEST(SchedulerRewind, EndingBeforeTheCopyRunsLeavesNothingPinned) {
  Harness h(small_config(16, 4, /*prefix_cache=*/true));
  const SeqId a = h.submit(ids_from(10, 6), 12, 5);
  for (int i = 0; i < 9; ++i) h.step();
  ASSERT_TRUE(h.rewind(a, 1).ok());
  EXPECT_EQ(h.scheduler().stats().rewind_page_copies, 1);
  ASSERT_TRUE(h.scheduler().cancel(a).ok());
  EXPECT_TRUE(h.scheduler().check_invariants().ok()) << h.scheduler().check_invariants();
  SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.free_pages + s.cached_pages, 16) << "a page stayed pinned";
  EXPECT_FALSE(h.scheduler().next_step().has_value());
  s = h.scheduler().stats();
  EXPECT_EQ(s.free_pages + s.cached_pages, 16);
  EXPECT_EQ(s.shared_pages, 0);
}

// Rewinding to a page boundary copies nothing: the page written from its first position is
// given back when indexed and a fresh one is allocated.
TEST(SchedulerRewind, RewindToAPageBoundaryGivesTheIndexedPageBack) {
  Harness h(small_config(16, 4, /*prefix_cache=*/true));
  const SeqId a = h.submit(ids_from(10, 5), 12, 5);
  for (int i = 0; i < 8; ++i) h.step();
  const std::vector<int32_t> pages_before = h.step()->sequences[0].page_table;
  ASSERT_TRUE(h.rewind(a, 4).ok());  // 9 tokens kept: position 8 (page 2's first) is written again
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->page_copies.empty());
  const SequencePlan* sa = find_seq(*plan, a);
  EXPECT_EQ(sa->start_pos, 8);
  EXPECT_EQ(sa->page_table[0], pages_before[0]);
  EXPECT_EQ(sa->page_table[1], pages_before[1]);
  EXPECT_NE(sa->page_table[2], pages_before[2]);
  EXPECT_EQ(h.scheduler().stats().rewind_page_copies, 0);
  h.run_to_end();
}

// A page another running sequence holds: A and B are the same request (prompt and seed), B is
// preempted when the cache runs short and re-admitted onto A's pages, which hold its outputs too.
// B's rewind into one of them takes a private copy; A keeps reading its own KV there (the fake
// worker checks every position A attends to).
TEST(SchedulerRewind, CopiesAPageAnotherRunningSequenceHolds) {
  SchedulerConfig c = small_config(14, 4, /*prefix_cache=*/true);
  c.max_batch = 2;
  Harness h(c);
  const std::vector<int32_t> prompt = ids_from(20, 8);
  const SeqId a = h.submit(prompt, 30, 77);
  const SeqId b = h.submit(prompt, 30, 77);
  int32_t w = -1;
  std::vector<int32_t> a_pages, b_pages;
  for (int i = 0; i < 60 && w < 0; ++i) {
    std::optional<StepPlan> plan = h.step();
    ASSERT_TRUE(plan.has_value());
    if (h.scheduler().stats().preemptions == 0) continue;
    const SequencePlan* sa = find_seq(*plan, a);
    const SequencePlan* sb = find_seq(*plan, b);
    if (sa == nullptr || sb == nullptr || !sb->sample) continue;
    a_pages = sa->page_table;
    b_pages = sb->page_table;
    // The last position of B's that sits in a page A holds too, and is not a page's first.
    const int32_t known = static_cast<int32_t>(prompt.size() + h.scheduler().output_tokens(b).size());
    for (int32_t p = known - 2; p >= static_cast<int32_t>(prompt.size()) && w < 0; --p) {
      const size_t k = static_cast<size_t>(p / 4);
      if (p % 4 != 0 && k < a_pages.size() && k < b_pages.size() && a_pages[k] == b_pages[k]) w = p;
    }
  }
  ASSERT_GE(w, 0) << "B never ran on A's pages after a preemption";
  const int64_t copies = h.scheduler().stats().rewind_page_copies;
  ASSERT_TRUE(h.rewind(b, w - static_cast<int32_t>(prompt.size()) + 1).ok());
  EXPECT_EQ(h.scheduler().stats().rewind_page_copies, copies + 1);
  std::optional<StepPlan> plan = h.step();
  ASSERT_TRUE(plan.has_value());
  const SequencePlan* sb = find_seq(*plan, b);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->start_pos, w);
  const size_t k = static_cast<size_t>(w / 4);
  ASSERT_EQ(plan->page_copies.size(), 1u);
  EXPECT_EQ(plan->page_copies[0].src, a_pages[k]);
  EXPECT_EQ(plan->page_copies[0].dst, sb->page_table[k]);
  EXPECT_NE(sb->page_table[k], a_pages[k]);
  const SequencePlan* sa = find_seq(*plan, a);
  if (sa != nullptr) {
    EXPECT_EQ(sa->page_table[k], a_pages[k]) << "A keeps its page";
  }
  h.run_to_end();
  const SchedulerStats s = h.scheduler().stats();
  EXPECT_EQ(s.free_pages + s.cached_pages, 14);
  EXPECT_EQ(s.shared_pages, 0);
}

// ---- Randomized mixed traffic with rewinds ------------------------------------------------------

class RewindTraffic {
 public:
  RewindTraffic(SchedulerConfig c, uint64_t seed) : scheduler_(c), worker_(c, requests_), rng_(seed) {
    for (const int32_t len : {7, 18, 33}) {
      std::vector<int32_t> p(len);
      for (int32_t& t : p) t = uniform(3, kVocab - 1);
      prefixes_.push_back(p);
    }
  }

  void run(int32_t requests) {
    int guard = 0;
    while (submitted_ < requests && ++guard < 200000) {
      maybe_submit();
      maybe_end(0.02);
      if (!step()) return;
    }
    for (int i = 0; i < 200000 && !scheduler_.idle(); ++i) {
      if (!step()) return;
    }
  }

  const Scheduler& scheduler() const { return scheduler_; }
  int32_t submitted() const { return submitted_; }
  int64_t finished() const { return finished_; }
  int64_t refused() const { return refused_; }
  int64_t rewinds_into_shared() const { return rewinds_into_shared_; }
  size_t live() const { return seqs_.size(); }

 private:
  struct Expect {
    std::vector<int32_t> tokens;                // prompt + output, as the scheduler should hold them
    int32_t prompt_len = 0;
    std::map<int32_t, std::vector<int32_t>> bans;  // output position -> ids, increasing
    std::vector<int32_t> page_table;               // from its last plan
  };

  int32_t uniform(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }
  double coin() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

  bool check() {
    const absl::Status s = scheduler_.check_invariants();
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }

  bool step() {
    std::optional<StepPlan> plan = scheduler_.next_step();
    if (!check()) return false;
    if (!plan.has_value()) return true;
    for (const SequencePlan& s : plan->sequences) {
      Expect& e = seqs_.at(s.seq_id);
      e.page_table = s.page_table;
      const int32_t at = static_cast<int32_t>(e.tokens.size()) - e.prompt_len;
      auto bans = e.bans.find(at);
      const std::vector<int32_t> expected = s.sample && bans != e.bans.end() ? bans->second : std::vector<int32_t>{};
      EXPECT_EQ(s.banned_now, expected) << "sequence " << s.seq_id << " at output position " << at;
    }
    const StepOutcome outcome = worker_.run(*plan);
    if (testing::Test::HasFatalFailure()) return false;
    maybe_end(0.03);
    auto updates = scheduler_.complete_step(outcome);
    EXPECT_TRUE(updates.ok()) << updates.status();
    if (!updates.ok() || !check()) return false;
    for (const SequenceUpdate& u : *updates) apply(u);
    return !testing::Test::HasFailure();
  }

  void maybe_submit() {
    if (coin() > 0.6) return;
    std::vector<int32_t> prompt;
    if (coin() < 0.85) {
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
    const uint64_t seed = coin() < 0.3 ? 12345 : rng_();  // the same seed: identical continuations
    params.sampling.seed = seed;
    auto request = validate_request(params, ModelLimits{kVocab, context, {kEos}}, prompt, 0);
    ASSERT_TRUE(request.ok()) << request.status();
    auto id = scheduler_.submit(*request);
    if (!id.ok()) {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kResourceExhausted) << id.status();
      return;
    }
    ++submitted_;
    requests_[*id] = Request{seed, 30, kVocab, {}};
    Expect e;
    e.tokens = prompt;
    e.prompt_len = static_cast<int32_t>(prompt.size());
    seqs_[*id] = std::move(e);
  }

  void maybe_end(double probability) {
    if (seqs_.empty() || coin() > probability) return;
    auto it = seqs_.begin();
    std::advance(it, uniform(0, static_cast<int32_t>(seqs_.size()) - 1));
    const absl::Status status =
        coin() < 0.5 ? scheduler_.cancel(it->first) : scheduler_.finish(it->first, FinishReason::kStopString);
    ASSERT_TRUE(status.ok()) << status;
    seqs_.erase(it);
  }

  void apply(const SequenceUpdate& u) {
    auto it = seqs_.find(u.seq_id);
    ASSERT_NE(it, seqs_.end()) << "update for ended sequence " << u.seq_id;
    Expect& e = it->second;
    e.tokens.insert(e.tokens.end(), u.new_tokens.begin(), u.new_tokens.end());
    const std::vector<int32_t> out = scheduler_.output_tokens(u.seq_id);
    if (u.finish_reason.has_value()) {
      EXPECT_TRUE(out.empty());
      EXPECT_EQ(scheduler_.rewind(u.seq_id, 0, 0).code(), absl::StatusCode::kNotFound);
      seqs_.erase(it);
      ++finished_;
      return;
    }
    ASSERT_EQ(out, std::vector<int32_t>(e.tokens.begin() + e.prompt_len, e.tokens.end())) << "sequence " << u.seq_id;
    ASSERT_EQ(worker_.history(u.seq_id), e.tokens) << "worker history of sequence " << u.seq_id;
    if (coin() > 0.25 || out.empty()) return;
    // A banned string matched somewhere in the last few tokens.
    const int32_t generated = static_cast<int32_t>(out.size());
    const int32_t keep = uniform(std::max(0, generated - 6), generated - 1);
    const int32_t position = e.prompt_len + keep;
    const int32_t page = position - 1 >= 0 && !e.page_table.empty() ? e.page_table[(position - 1) / page_size()] : -1;
    // Whether another running sequence holds that page (tables only grow between plans).
    bool shared = false;
    for (const auto& [other, o] : seqs_) {
      const std::optional<SequenceInfo> info = scheduler_.sequence_info(other);
      shared |= other != u.seq_id && info.has_value() && info->state == SequenceState::kRunning &&
                std::find(o.page_table.begin(), o.page_table.end(), page) != o.page_table.end();
    }
    const absl::Status status = scheduler_.rewind(u.seq_id, keep, out[keep]);
    if (!check()) return;
    const int32_t prior = e.bans.count(keep) != 0 ? static_cast<int32_t>(e.bans[keep].size()) : 0;
    if (!status.ok()) {
      ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      ++refused_;
      return;
    }
    rewinds_into_shared_ += shared ? 1 : 0;
    e.bans.erase(e.bans.upper_bound(keep), e.bans.end());
    std::vector<int32_t>& b = e.bans[keep];
    b.insert(std::lower_bound(b.begin(), b.end(), out[keep]), out[keep]);
    ASSERT_EQ(static_cast<int32_t>(b.size()), prior + 1) << "a token banned there was sampled";
    e.tokens.resize(static_cast<size_t>(position));
  }

  int32_t page_size() const { return scheduler_.config().page_size; }

  std::map<SeqId, Request> requests_;
  Scheduler scheduler_;
  FakeWorker worker_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int32_t>> prefixes_;
  std::map<SeqId, Expect> seqs_;
  int32_t submitted_ = 0;
  int64_t finished_ = 0;
  int64_t refused_ = 0;
  int64_t rewinds_into_shared_ = 0;
};

void run_traffic(int32_t decode_steps, bool prefix_cache, uint64_t seed) {
  SchedulerConfig c;
  c.num_pages = 30;
  c.page_size = 4;
  c.max_batch = 6;
  c.max_step_tokens = 40;
  c.prefill_chunk = 16;
  c.max_queue = 10;
  c.decode_steps = decode_steps;
  c.prefix_cache = prefix_cache;
  RewindTraffic sim(c, seed);
  sim.run(1000);
  ASSERT_FALSE(testing::Test::HasFailure());
  const SchedulerStats s = sim.scheduler().stats();
  EXPECT_EQ(sim.submitted(), 1000);
  EXPECT_TRUE(sim.scheduler().idle());
  EXPECT_EQ(sim.live(), 0u);
  EXPECT_EQ(s.free_pages + s.cached_pages, c.num_pages) << "pages leaked";
  EXPECT_EQ(s.shared_pages, 0);
  if (!prefix_cache) {
    EXPECT_EQ(s.cached_pages, 0);
    EXPECT_EQ(sim.rewinds_into_shared(), 0);
  }
  EXPECT_EQ(s.completed + s.cancelled, s.submitted);
  EXPECT_GT(s.rewinds, 1000);
  EXPECT_GT(s.preemptions, 0);
  if (prefix_cache) {
    EXPECT_GT(s.rewind_page_copies, 50);
    EXPECT_GT(s.prompt_tokens_reused, s.prompt_tokens / 5);
  } else {
    EXPECT_EQ(s.rewind_page_copies, 0);
  }
  std::printf(
      "decode_steps %d, prefix cache %d: %lld steps, %lld finished, %lld rewinds (%lld copied a page, %lld in a page "
      "another running sequence held), %lld preemptions, prompt tokens %lld reused of %lld\n",
      decode_steps, prefix_cache ? 1 : 0, static_cast<long long>(s.steps), static_cast<long long>(sim.finished()),
      static_cast<long long>(s.rewinds), static_cast<long long>(s.rewind_page_copies),
      static_cast<long long>(sim.rewinds_into_shared()), static_cast<long long>(s.preemptions),
      static_cast<long long>(s.prompt_tokens_reused), static_cast<long long>(s.prompt_tokens));
}

TEST(SchedulerRewind, MixedTrafficWithRewindsSingleStepDecode) { run_traffic(1, true, 515); }

TEST(SchedulerRewind, MixedTrafficWithRewindsMultiStepDecode) { run_traffic(3, true, 9090); }

TEST(SchedulerRewind, MixedTrafficWithRewindsWithoutPrefixReuse) { run_traffic(2, false, 31337); }

}  // namespace
}  // namespace exl3
