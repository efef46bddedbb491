// Scheduler::rewind (banned strings): hand cases (truncation, the last kept token run again, bans
// at the first draw only and accumulating per position, errors, the rewind limit, bans that would
// leave no token, copy-on-write of an indexed page whose original stays cached and intact) and a
// randomized run of mixed requests with random rewinds, preemption pressure, cancellations and
// prefix reuse on and off, with the invariants checked after every call and every page free or
// cached at the end.
//
// The fake worker keeps a paged "KV cache" (fake_worker.h) and checks that every position before
// start_pos holds the fingerprint of the sequence's history (so a rewind that wrote a shared or
// cached page, or lost a copy, is caught when another sequence reads it); it samples a pure
// function of (seed, position, the ids banned at that draw): banned_now only at a step's first draw.
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

// The fake paged-KV worker (fake_worker.h) drawing each request's tokens with its bans.
class FakeWorker : public testing::PagedKvWorker {
 public:
  FakeWorker(const SchedulerConfig& c, const std::map<SeqId, Request>& requests)
      : PagedKvWorker(c), requests_(requests) {}

 private:
  void check_sequence(const SequencePlan& seq, const std::vector<int32_t>&) override {
    EXPECT_TRUE(seq.sample || seq.banned_now.empty()) << "bans on a chunk that does not sample";
  }

  void check_token(const SequencePlan&, int32_t, int32_t) override {}

  int32_t sample(const SequencePlan& seq, int32_t position, int32_t i) override {
    const Request& request = requests_.at(seq.seq_id);
    std::vector<int32_t> banned = request.always_banned;
    if (i == 0) {
      banned.insert(banned.end(), seq.banned_now.begin(), seq.banned_now.end());
      std::sort(banned.begin(), banned.end());
    }
    return draw(request.seed, position, banned, request.eos_every, request.vocab);
  }

  const std::map<SeqId, Request>& requests_;
};

SchedulerConfig small_config(int32_t num_pages, int32_t page_size, bool prefix_cache, int32_t decode_steps = 1) {
  SchedulerConfig c = testing::hand_config(num_pages, page_size);
  c.decode_steps = decode_steps;
  c.prefix_cache = prefix_cache;
  return c;
}

class Harness : public testing::StepHarness {
 public:
  explicit Harness(SchedulerConfig c) : StepHarness(c), worker_(c, requests_) {}

  SeqId submit(const std::vector<int32_t>& prompt, int32_t max_new_tokens, uint64_t seed,
               const ModelLimits& limits = ModelLimits{kVocab, 4096, {kEos}}, std::vector<int32_t> banned = {}) {
    ValidatedRequest request;
    const SeqId id = submit_request(prompt, max_new_tokens, seed, limits, banned, &request);
    std::sort(banned.begin(), banned.end());
    requests_[id] = Request{seed, 0, limits.vocab_size, banned};
    return id;
  }

  // Rewinds `id` to `keep` output tokens, banning the token it had there; checks the invariants.
  absl::Status rewind(SeqId id, int32_t keep) {
    const std::vector<int32_t> out = scheduler_.output_tokens(id);
    EXPECT_LT(keep, static_cast<int32_t>(out.size()));
    const absl::Status s = scheduler_.rewind(id, keep, out.at(keep));
    EXPECT_TRUE(scheduler_.check_invariants().ok()) << scheduler_.check_invariants();
    return s;
  }

  FakeWorker& worker() override { return worker_; }

 private:
  std::map<SeqId, Request> requests_;
  FakeWorker worker_;
};

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

class RewindTraffic : public testing::RandomTraffic {
 public:
  RewindTraffic(SchedulerConfig c, uint64_t seed)
      : RandomTraffic(c, seed, kVocab, /*context=*/90, kEos, /*guard_limit=*/200000), worker_(c, requests_) {}

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

  testing::PagedKvWorker& worker() override { return worker_; }

  // The bans each sampling sequence must carry at this draw.
  void before_step(const StepPlan& plan) override {
    for (const SequencePlan& s : plan.sequences) {
      Expect& e = seqs_.at(s.seq_id);
      e.page_table = s.page_table;
      const int32_t at = static_cast<int32_t>(e.tokens.size()) - e.prompt_len;
      auto bans = e.bans.find(at);
      const std::vector<int32_t> expected = s.sample && bans != e.bans.end() ? bans->second : std::vector<int32_t>{};
      EXPECT_EQ(s.banned_now, expected) << "sequence " << s.seq_id << " at output position " << at;
    }
  }

  void on_submitted(SeqId id, const ValidatedRequest&, const testing::RandomRequest& drawn) override {
    requests_[id] = Request{*drawn.params.sampling.seed, 30, kVocab, {}};
    Expect e;
    e.tokens = drawn.prompt;
    e.prompt_len = static_cast<int32_t>(drawn.prompt.size());
    seqs_[id] = std::move(e);
  }

  void maybe_end(double probability) override { end_at_random(seqs_, probability); }

  void apply(const SequenceUpdate& u) override {
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
  FakeWorker worker_;
  std::map<SeqId, Expect> seqs_;
  int64_t finished_ = 0;
  int64_t refused_ = 0;
  int64_t rewinds_into_shared_ = 0;
};

void run_traffic(int32_t decode_steps, bool prefix_cache, uint64_t seed) {
  RewindTraffic sim(testing::random_traffic_config(decode_steps, prefix_cache), seed);
  sim.run(1000);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const SchedulerStats s = sim.scheduler().stats();
  EXPECT_EQ(sim.submitted(), 1000);
  EXPECT_EQ(sim.live(), 0u);
  testing::expect_drained(sim.scheduler());
  if (!prefix_cache) {
    EXPECT_EQ(s.cached_pages, 0);
    EXPECT_EQ(sim.rewinds_into_shared(), 0);
  }
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
