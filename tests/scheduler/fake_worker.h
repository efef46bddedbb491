// A fake worker for Scheduler tests that keeps a real paged "KV cache" (prefix_cache_test.cpp,
// scheduler_rewind_test.cpp): the slot of position p holds a fingerprint of the sequence's tokens
// [0, p], computed from the slot of p - 1 read through the page table, as attention would. It
// applies page copies before a step, checks that no page written in a step appears in another
// sequence's page table of that step, keeps each sequence's token history as the engine does
// (history_prefix on a first chunk, truncated to start_pos on later ones) and checks that every
// position before start_pos holds the fingerprint of that history. What a sequence samples is the
// test's: a subclass implements sample_sequence.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace exl3::testing {

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// KV "value" at a position: a function of the previous position's value and this token.
inline uint64_t kv_value(uint64_t previous, int32_t token) {
  return mix(previous ^ mix(static_cast<uint64_t>(token) + 1));
}

class PagedKvWorker {
 public:
  explicit PagedKvWorker(const SchedulerConfig& c)
      : page_size_(c.page_size), slots_(static_cast<size_t>(c.num_pages) * c.page_size, 0) {}
  virtual ~PagedKvWorker() = default;

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
      const int32_t last =
          seq.start_pos + static_cast<int32_t>(seq.tokens.size()) + (seq.sample ? plan.decode_steps - 1 : 0);
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

 protected:
  // Checks `seq`'s chunk (its history and tokens are the test's truth so far) before it is fed.
  virtual void check_sequence(const SequencePlan& seq, const std::vector<int32_t>& history) = 0;
  // Checks a token about to be written at `position` of `seq`.
  virtual void check_token(const SequencePlan& seq, int32_t position, int32_t token) = 0;
  // The token `seq` samples at `position`, at decode iteration `i` of the step.
  virtual int32_t sample(const SequencePlan& seq, int32_t position, int32_t i) = 0;

 private:
  void run_sequence(const StepPlan& plan, const SequencePlan& seq, StepOutcome& outcome) {
    auto h = history_.find(seq.seq_id);
    if (h == history_.end()) {
      EXPECT_EQ(static_cast<int32_t>(seq.history_prefix.size()), seq.start_pos)
          << "sequence " << seq.seq_id << " starts at " << seq.start_pos << " without its history";
      h = history_.emplace(seq.seq_id, seq.history_prefix).first;
    } else {
      // Like the engine: the history ends with the last sampled token, which this chunk feeds; a
      // rewind (or a recompute) continues below it.
      EXPECT_TRUE(seq.history_prefix.empty()) << "sequence " << seq.seq_id << ": history prefix on a later chunk";
      EXPECT_GE(static_cast<int32_t>(h->second.size()), seq.start_pos) << "sequence " << seq.seq_id;
      h->second.resize(seq.start_pos);
    }
    std::vector<int32_t>& history = h->second;
    check_sequence(seq, history);
    // Everything before start_pos must hold this sequence's own KV.
    uint64_t expected = 0;
    for (int32_t p = 0; p < seq.start_pos; ++p) {
      ASSERT_LT(p, static_cast<int32_t>(history.size())) << "sequence " << seq.seq_id;
      expected = kv_value(expected, history[p]);
      ASSERT_EQ(slots_[slot(seq, p)], expected)
          << "KV of sequence " << seq.seq_id << " at position " << p << " (page " << seq.page_table[p / page_size_]
          << ") is not its own";
    }
    int32_t position = seq.start_pos;
    auto feed = [&](int32_t token) {
      check_token(seq, position, token);
      const uint64_t previous = position == 0 ? 0 : slots_[slot(seq, position - 1)];
      slots_[slot(seq, position)] = kv_value(previous, token);
      history.push_back(token);
      ++position;
    };
    for (const int32_t token : seq.tokens) feed(token);
    if (!seq.sample) return;
    SequenceResult result{seq.seq_id, {}};
    for (int32_t i = 0; i < plan.decode_steps; ++i) {
      const int32_t token = sample(seq, position, i);
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
  std::map<SeqId, std::vector<int32_t>> history_;  // the worker's token history per live sequence
};

}  // namespace exl3::testing
