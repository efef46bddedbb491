// ServingLoop: the coordinator's step thread. It asks the scheduler for the next batch, sends it
// to every worker rank, feeds the sampled tokens back, detokenizes incrementally, applies banned
// strings (rewinding the sequence through the scheduler) and then stop strings, and hands text to
// each request's channel. A failed step (a worker died, a deadline)
// fails every in-flight request with the group's status and stops the loop.
//
// With SchedulerConfig::pipeline the loop keeps two steps in flight: while the workers run step N
// it has already sent step N + 1 (planned from where N leaves the sequences, decoding ones
// continuing from the tokens the workers sampled in N), so a worker starts N + 1 as soon as N ends
// instead of waiting for N's result to travel to the coordinator, be streamed and scheduled, and
// the next command to travel back. N's result is then streamed while N + 1 runs; what N + 1 did for
// a sequence that stopped in N is dropped (Scheduler: Pipelining). Releases go out just before the
// step they precede and memory pings just after one, without a round trip of their own.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "coordinator/scheduler/scheduler.h"
#include "coordinator/server/banned_string_filter.h"
#include "coordinator/server/request_channel.h"
#include "coordinator/server/stop_string_filter.h"
#include "coordinator/server/worker_group.h"
#include "coordinator/tokenizer/streaming_detokenizer.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace exl3 {

// Speculative decoding's rounds and the draft tokens proposed and kept in them.
struct SpeculationTotals {
  int64_t rounds = 0;
  int64_t proposed = 0;
  int64_t accepted = 0;
};

struct ServingTotals {
  SchedulerStats scheduler;
  SpeculationTotals speculation;
  double uptime_s = 0.0;
  double recent_tokens_per_s = 0.0;  // over the last 10 s
  double mean_tokens_per_s = 0.0;    // generated tokens over busy time
};

class ServingLoop {
 public:
  using FailureCallback = std::function<void(const absl::Status&)>;

  ServingLoop(const Tokenizer& tokenizer, std::shared_ptr<WorkerGroup> group, const SchedulerConfig& config,
              std::chrono::milliseconds step_timeout, FailureCallback on_failure);
  ~ServingLoop();

  void start();
  // Stops admitting new requests; waits up to `timeout` for running ones to finish; then stops the
  // thread, failing what is left with UNAVAILABLE.
  void drain_and_stop(std::chrono::milliseconds timeout);

  struct Submitted {
    SeqId id;
    std::shared_ptr<RequestChannel> channel;
  };
  absl::StatusOr<Submitted> submit(ValidatedRequest request);
  void cancel(SeqId id);
  ServingTotals totals();

  // The workers' last memory reports (by rank) and their age: the loop refreshes them between
  // steps every kMemoryRefresh, so a reader (Stats) never waits behind a step. Empty before the
  // first refresh.
  struct WorkerMemory {
    std::vector<pb::MemoryReport> reports;
    double age_s = 0.0;
  };
  WorkerMemory worker_memory();
  static constexpr std::chrono::milliseconds kMemoryRefresh{2000};

 private:
  struct Live {
    std::shared_ptr<RequestChannel> channel;
    std::unique_ptr<StreamingDetokenizer> detokenizer;
    bool skip_special_tokens = false;  // the detokenizer's setting (rebuilt after a rewind)
    // Banned strings come first: only the tokens and text it releases reach the stop strings.
    std::unique_ptr<BannedStringFilter> banned;
    std::unique_ptr<StopStringFilter> stops;
    std::chrono::steady_clock::time_point arrival, first_token;
    bool sampled = false;  // first_token is set
    int32_t prompt_tokens = 0;
    int32_t completion_tokens = 0;  // tokens handed to the channel
  };

  // A step sent to the workers, not completed yet (step thread only).
  struct SentStep {
    StepPlan plan;
    std::optional<uint64_t> release;  // command id of the ReleaseSequences sent just before it
    uint64_t step = 0;                // command id of the Step
    std::optional<uint64_t> ping;     // command id of a memory Ping sent just after it
    std::chrono::steady_clock::time_point sent_at;
  };

  void run();
  // Sends the plan's releases, the step and (when the memory reports are stale) a ping, without
  // waiting for their results. False when the group failed (already reported).
  bool send_step(StepPlan plan);
  // Waits for the oldest sent step's results (under step_timeout_), then completes it in the
  // scheduler and streams its tokens. False when the group failed (already reported).
  bool complete_oldest();
  absl::Status collect_step(const SentStep& sent, StepOutcome* outcome);
  // Fails every request and reports `status` through on_failure_ (a broken group).
  void group_failed(const absl::Status& status);
  void apply_updates(const std::vector<SequenceUpdate>& updates);
  // A banned string in the held output of a live sequence: asks the scheduler to rewind it to the
  // match's first token (banning that token there) and rebuilds the detokenizer from the kept
  // tokens. False when the scheduler refuses (rewind limit, no token left): the caller then ends
  // the request at the banned string.
  bool rewind_banned(SeqId id, Live& live, const BannedStringFilter::Match& match);
  // Hands released tokens and text through the stop strings to the channel, and ends the request
  // on a stop string or when `finish` is set.
  void deliver(SeqId id, Live& live, BannedStringFilter::Release release, std::optional<FinishReason> finish);
  // Logprobs the last step's workers reported, per sequence (step thread only; run_step fills,
  // apply_updates hands the first new_tokens.size() of them to the channel).
  std::map<SeqId, std::vector<TokenLogprobs>> step_logprobs_;
  void end_live(SeqId id, FinishReason reason);
  // Adds a completed step's speculative rounds to speculation_ (mu_ held).
  void count_speculation(const StepPlan& plan, const StepOutcome& outcome);
  void fail_all(const absl::Status& status);
  // Fails the sequences of a step whose result was rejected (they cannot go on: the workers'
  // state moved on without the coordinator); the others keep running.
  void fail_step(const StepPlan& plan, const absl::Status& status);
  // Pings the workers for their memory reports when the last ones are older than kMemoryRefresh;
  // false when the group failed (already reported through on_failure_).
  bool refresh_worker_memory();

  const Tokenizer& tokenizer_;
  std::shared_ptr<WorkerGroup> group_;
  const std::chrono::milliseconds step_timeout_;
  FailureCallback on_failure_;

  std::mutex mu_;
  std::condition_variable cv_;
  Scheduler scheduler_;
  std::map<SeqId, Live> live_;
  bool accepting_ = true;
  bool stop_ = false;
  std::thread thread_;

  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  double busy_seconds_ = 0.0;
  SpeculationTotals speculation_;
  std::vector<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;  // (time, tokens)
  std::vector<pb::MemoryReport> worker_memory_;
  std::chrono::steady_clock::time_point memory_at_{};
  std::deque<SentStep> sent_;  // oldest first; step thread only
  std::chrono::steady_clock::time_point last_completion_{};  // of a step (busy time, step thread only)
};

}  // namespace exl3
