// Shared by the step-graph GPU tests: sequences driven in lockstep through several models (an eager
// reference, an eager control and one with step graphs), each model with its own KV cache but the
// same scattered page tables, grown a page at a time so decode steps cross page buckets. Every step's
// logits are compared, and the step-graph keys the decode steps must have produced are collected.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace exl3::testing {

inline constexpr int64_t kGraphPageSize = 16;
inline constexpr int64_t kGraphNumPages = 64;
inline constexpr int64_t kGraphMaxPagesPerSeq = 16;
// Graph vs eager logits: at most this plus twice the spread between two eager runs of the same
// step (the EXL3 GEMV's split-K adds fp32 partials with atomics, so eager runs are not bit-exact
// either). Graph steps plan attention for the bucket's last position, which can change its key
// split count and so the fp32 summation order of the softmax.
inline constexpr double kGraphLogitsTolerance = 1e-3;

// Limits of every model of these tests (graphs on or off).
inline StepLimits step_graph_limits(bool graphs) {
  StepLimits l;
  l.max_step_tokens = 128;
  l.max_seqs = 4;
  l.max_pages_per_seq = kGraphMaxPagesPerSeq;
  l.max_logit_rows = 4;
  l.step_graphs = graphs;
  return l;
}

// One model's view of a step: the model, its cache and communicator (null for one rank).
struct Lane {
  std::string name;
  const LlamaModel* model = nullptr;
  KvCache* cache = nullptr;
  Communicator* comm = nullptr;
};

struct Sequence {
  std::vector<int32_t> tokens;  // prompt and greedy tokens so far
  int64_t run = 0;              // tokens already in the caches
  std::vector<int32_t> pages;   // the page table every lane's cache uses for this sequence
  int64_t index = 0;            // which physical pages it gets (see grow_pages)
};

// Physical page of logical page `i` of sequence `index`: a bijection of [0, 64) for index < 4 and
// i < 16, scattered (stride 7) and shifted by `salt` so that another run gets other pages.
inline int32_t physical_page(int64_t index, int64_t i, int64_t salt) {
  return static_cast<int32_t>((7 * (index * kGraphMaxPagesPerSeq + i) + salt) % kGraphNumPages);
}

inline void grow_pages(Sequence& s, int64_t positions, int64_t salt) {
  while (static_cast<int64_t>(s.pages.size()) * kGraphPageSize < positions) {
    s.pages.push_back(physical_page(s.index, static_cast<int64_t>(s.pages.size()), salt));
  }
}

// Deterministic prompt tokens in [2, vocab).
inline std::vector<int32_t> prompt(int64_t n, int64_t vocab, uint64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ (salt * 0xBF58476D1CE4E5B9ull);
    t[static_cast<size_t>(i)] = static_cast<int32_t>(2 + (h >> 17) % static_cast<uint64_t>(vocab - 2));
  }
  return t;
}

inline int64_t page_bucket(int64_t pages) {
  int64_t b = 1;
  while (b < pages) b *= 2;
  return std::min(b, kGraphMaxPagesPerSeq);
}

struct LockstepStats {
  double max_graph_diff = 0.0;    // max |graph - reference| over every logit of every step
  double max_control_diff = 0.0;  // max |control - reference|
  int argmax_mismatches = 0;      // rows whose argmax differs where the reference had no near tie
  int near_ties = 0;              // rows whose argmax differs within the measured difference
  int64_t steps = 0;
  int64_t decode_steps = 0;                          // steps of one token per sequence
  std::set<std::pair<int64_t, int64_t>> graph_keys;  // (sequences, page bucket) of the decode steps
};

inline int64_t argmax_row(const float* row, int64_t vocab) {
  return static_cast<int64_t>(std::max_element(row, row + vocab) - row);
}

// Runs the sequences `which` one step (their tokens not yet in the caches, logits of the last) on
// every lane: lanes[0] the eager reference, lanes[1] an eager control, lanes[2] with step graphs.
// Appends the reference's argmax to each sequence. `verbose` prints a line per step.
inline void lockstep(const std::vector<Lane>& lanes, std::vector<Sequence>& seqs, const std::vector<size_t>& which,
                     int64_t salt, LockstepStats& stats, const std::string& label, bool verbose) {
  ASSERT_EQ(lanes.size(), 3u);
  std::vector<BatchEntry> batch;
  bool decode = true;
  int64_t max_pages = 0;
  for (size_t w : which) {
    Sequence& s = seqs.at(w);
    const int64_t end = static_cast<int64_t>(s.tokens.size());
    ASSERT_LT(s.run, end) << label << ": sequence " << w << " has nothing to run";
    grow_pages(s, end, salt);
    const std::span<const int32_t> tokens(s.tokens.data() + s.run, static_cast<size_t>(end - s.run));
    batch.push_back(BatchEntry{tokens, static_cast<int32_t>(s.run), s.pages, LogitsMode::kLast});
    decode = decode && tokens.size() == 1;
    max_pages = std::max<int64_t>(max_pages, static_cast<int64_t>(s.pages.size()));
  }
  std::vector<Tensor> logits;
  for (const Lane& lane : lanes) {
    absl::StatusOr<Tensor> out = lane.model->forward_batch(batch, *lane.cache, lane.comm);
    ASSERT_TRUE(out.ok()) << label << " on " << lane.name << ": " << out.status();
    ASSERT_EQ(out->dim(0), static_cast<int64_t>(which.size()));
    logits.push_back(*std::move(out));
  }
  const int64_t vocab = logits[0].dim(1);
  const float* ref = logits[0].data<float>();
  const float* control = logits[1].data<float>();
  const float* graph = logits[2].data<float>();
  double graph_diff = 0.0, control_diff = 0.0;
  int64_t worst = 0;
  for (int64_t i = 0; i < logits[0].numel(); ++i) {
    const double d = std::fabs(static_cast<double>(graph[i]) - ref[i]);
    if (!(d <= graph_diff)) {  // NaN counts as worst
      graph_diff = std::isnan(d) ? INFINITY : d;
      worst = i;
    }
    control_diff = std::max(control_diff, std::fabs(static_cast<double>(control[i]) - ref[i]));
  }
  for (size_t row = 0; row < which.size(); ++row) {
    const float* r = ref + row * vocab;
    const int64_t a = argmax_row(r, vocab), g = argmax_row(graph + row * vocab, vocab);
    if (a != g) {
      const double gap = static_cast<double>(r[a]) - r[g];
      const bool tie = gap <= 2.0 * graph_diff;
      (tie ? stats.near_ties : stats.argmax_mismatches)++;
      std::printf("%s: row %zu argmax %lld (eager) vs %lld (graphs), eager gap %.3g%s\n", label.c_str(), row,
                  static_cast<long long>(a), static_cast<long long>(g), gap, tie ? " (near tie)" : "");
    }
    seqs[which[row]].run = static_cast<int64_t>(seqs[which[row]].tokens.size());
    seqs[which[row]].tokens.push_back(static_cast<int32_t>(a));
  }
  stats.max_graph_diff = std::max(stats.max_graph_diff, graph_diff);
  stats.max_control_diff = std::max(stats.max_control_diff, control_diff);
  ++stats.steps;
  if (decode) {
    ++stats.decode_steps;
    stats.graph_keys.insert({static_cast<int64_t>(which.size()), page_bucket(max_pages)});
  }
  if (verbose || graph_diff > kGraphLogitsTolerance) {
    std::printf("%s: %zu sequences, %lld pages (bucket %lld): max |graphs - eager| %.3g (at row %lld column %lld: "
                "%.6f vs %.6f), max |eager - eager| %.3g\n",
                label.c_str(), which.size(), static_cast<long long>(max_pages),
                static_cast<long long>(page_bucket(max_pages)), graph_diff, static_cast<long long>(worst / vocab),
                static_cast<long long>(worst % vocab), graph[worst], ref[worst], control_diff);
  }
}

// The checks at the end of a scenario: logits within tolerance, argmax equal (near ties aside),
// the graph lane captured one graph per key and replayed every decode step, the eager lanes none.
inline void expect_lockstep_results(const std::vector<Lane>& lanes, const LockstepStats& stats,
                                    int64_t captures_before, int64_t replays_before) {
  std::printf("%lld steps (%lld decode), %zu graph keys: max |graphs - eager| %.3g, max |eager - eager| %.3g, "
              "%d argmax mismatches, %d near ties; graphs captured %lld, replays %lld\n",
              static_cast<long long>(stats.steps), static_cast<long long>(stats.decode_steps), stats.graph_keys.size(),
              stats.max_graph_diff, stats.max_control_diff, stats.argmax_mismatches, stats.near_ties,
              static_cast<long long>(lanes[2].model->step_graph_count()),
              static_cast<long long>(lanes[2].model->graph_replays()));
  EXPECT_LE(stats.max_graph_diff, kGraphLogitsTolerance + 2.0 * stats.max_control_diff);
  EXPECT_EQ(stats.argmax_mismatches, 0);
  EXPECT_TRUE(lanes[2].model->step_graphs_enabled()) << "a capture failed (see stderr)";
  EXPECT_EQ(lanes[2].model->step_graph_count() - captures_before, static_cast<int64_t>(stats.graph_keys.size()));
  EXPECT_EQ(lanes[2].model->graph_replays() - replays_before, stats.decode_steps);
  EXPECT_GT(lanes[2].model->graph_replays(), 0);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(lanes[i].model->step_graph_count(), 0) << lanes[i].name;
    EXPECT_EQ(lanes[i].model->graph_replays(), 0) << lanes[i].name;
  }
}

// The scenario both tests run: prefill 3 sequences (5, 17, 40 tokens) in one step, 26 greedy
// decode steps of all three (the longest crosses 3 -> 4 -> 5 pages: buckets 4 and 8), then 40 of
// the first alone (2 -> 5 pages: buckets 2, 4 and 8).
inline LockstepStats run_decode_scenario(const std::vector<Lane>& lanes, int64_t vocab, int64_t salt,
                                         const std::string& label, bool verbose) {
  LockstepStats stats;
  std::vector<Sequence> seqs(3);
  const int64_t lengths[3] = {5, 17, 40};
  for (int64_t i = 0; i < 3; ++i) {
    seqs[i].tokens = prompt(lengths[i], vocab, static_cast<uint64_t>(salt * 10 + i + 1));
    seqs[i].index = i;
  }
  lockstep(lanes, seqs, {0, 1, 2}, salt, stats, label + " prefill", verbose);
  for (int step = 0; step < 26 && !::testing::Test::HasFatalFailure(); ++step) {
    lockstep(lanes, seqs, {0, 1, 2}, salt, stats, label + " decode x3 step " + std::to_string(step), verbose);
  }
  for (int step = 0; step < 40 && !::testing::Test::HasFatalFailure(); ++step) {
    lockstep(lanes, seqs, {0}, salt, stats, label + " decode x1 step " + std::to_string(step), verbose);
  }
  return stats;
}

}  // namespace exl3::testing
