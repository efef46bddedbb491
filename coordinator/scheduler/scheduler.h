// Scheduler: continuous batching with chunked prefill over a paged KV cache. Pure logic: single
// threaded (the caller holds its lock), deterministic, no clocks, no I/O, no protobuf. The gRPC
// layer converts a StepPlan into a control-plane Step (worker.proto) and a StepResult back into a
// StepOutcome.
//
// Driving it (one step in flight at a time; two with config.pipeline):
//   submit(validated request)            -> SeqId, or RESOURCE_EXHAUSTED (queue full / never fits)
//   loop:
//     plan = next_step()                 -> nullopt when there is nothing to run
//     send ReleaseSequences(plan.released), then Step(plan) to every rank
//     updates = complete_step(outcome)   -> new tokens per sequence, finish reasons
//     (stream text; on a stop string call finish(id, kStopString); on a banned string
//      rewind(id, kept output tokens, token to ban))
//   cancel(id) / finish(id, reason) at any time, also while a step is in flight.
//   With config.pipeline the caller plans and sends step N + 1 while step N runs (next_step() with
//   one step in flight) and completes them in order, so the workers never wait for a round trip.
//
// Policies (why in scheduler.cpp):
//  - Admission is strict FIFO by arrival: the oldest queued request is admitted when fewer than
//    max_batch sequences run and the available pages (free or cached) cover its reserve: all its
//    known tokens (the prompt) plus one step of decoding, capped at the most positions it can ever
//    write. Those pages are allocated at admission, so a prefill never needs more pages.
//  - Pages for generation grow per step: before each step every decoding sequence gets the pages
//    its next decode_steps positions need. When the cache runs out, the newest running sequence is
//    preempted by recomputation: its pages are released at once, it returns to the queue in arrival
//    order and, when admitted again, prefills its prompt and the tokens generated so far (with the
//    same seed and positions it samples the same tokens). The oldest sequence is never preempted for
//    a newer one, and a request that can never fit the whole cache is refused at submit, so the
//    oldest sequence always makes progress.
//  - A step runs every decoding sequence (one token each, oldest first), then fills the remaining
//    token budget (max_step_tokens) with prefill chunks of at most prefill_chunk tokens, oldest
//    sequence first; several prefills may share a step.
//  - A step's decode_steps is the configured value, lowered so that no sampling sequence can go past
//    its max_new_tokens (so no page is needed beyond a sequence's last position).
//  - Stop conditions on token ids are checked here, per sampled token in order: the model's EOS ids
//    (unless ignore_eos), stop_token_ids, max_new_tokens, the context limit. The stopping token is
//    returned. Stop strings are matched by the caller on the detokenized text, which then calls
//    finish(id, FinishReason::kStopString).
//  - Prefix reuse (config.prefix_cache; PrefixCache in prefix_cache.h): pages of computed KV stay
//    indexed by their token chain, also after their sequence ends (then evictable, least recently
//    used first, only when an allocation needs pages; admission and growth count them as
//    available). Admission matches the longest cached prefix of the sequence's known tokens, never
//    its last one (its logits are needed): full pages are shared by reference, the first differing
//    page is copied (StepPlan.page_copies) when a cached page continuing the chain shares c > 0 of
//    its first tokens, and the sequence starts at the reused length (SequencePlan.history_prefix
//    carries the reused ids on its first chunk). Nobody writes into a page another sequence or the
//    cache references: a shared page is full and before the sequence's first computed position.
//    A head request waits (strict FIFO) while a running sequence is still prefilling tokens that
//    it shares with it, so requests arriving together behind one long common prompt compute it once.
//    Preemption drops the sequence's references; its computed pages stay cached.
//  - Banned strings: rewind() takes a sequence back to its first n output tokens between steps
//    and bans, at output position n, the token it had sampled there; the next step runs its last
//    kept token again (its logits are needed) and its first draw gets the bans of that position
//    (SequencePlan.banned_now; bans of a position accumulate, those of later positions are dropped
//    since their prefix changed). Positions from the rewind point on are rewritten with other
//    tokens, so the sequence's index entries there are dropped from its chain, and nobody else's
//    KV is touched: the page holding the rewind point, when shared or indexed, is replaced by a
//    private copy (StepPlan.page_copies of the next plan; the original stays cached for others),
//    and later pages that are shared or indexed are given back (they stay cached with their old,
//    still valid, contents; growth allocates fresh ones). A sequence rewinds at most kMaxRewinds
//    times.
//  - Pipelining (config.pipeline): a step planned while step N is in flight plans every sequence
//    as N will leave it when N runs as planned. A sequence that samples in N continues in N + 1
//    from the last token the workers sampled for it (SequencePlan.from_last_sample: the scheduler
//    does not know that token yet), at the position after N's decode_steps tokens; one that surely
//    ends in N (its token limit) is left out; a prefill continues with its next chunk. When N's
//    result differs from that (a stop token, EOS or max_new_tokens inside N, a stop string,
//    cancellation, a rewind or a preemption), the sequence's part of N + 1 is void: its tokens are
//    dropped when N + 1 completes, a finished sequence's release reaches the workers after N + 1,
//    and a sequence that goes on is planned again from its real state (explicit tokens, start_pos)
//    in the step after. Each sequence carries an epoch that rewinds and preemptions bump; an
//    in-flight entry of an older epoch, or one that no longer starts where the sequence stands, is
//    void. What N + 1 writes for a void entry lands at positions its sequence has not computed
//    (never in a shared page, never before an indexed position), in pages that later steps write
//    before reading, and the workers run steps in order: no KV anyone reads is touched.
//  - No clocks: the caller timestamps submissions and updates for usage and rates.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/scheduler/page_allocator.h"
#include "coordinator/scheduler/prefix_cache.h"
#include "coordinator/scheduler/request.h"
#include "kernels/sampling.h"

namespace exl3 {

using SeqId = uint64_t;

struct SchedulerConfig {
  int32_t num_pages = 0;           // KV pages per rank (LoadShard.num_pages)
  int32_t page_size = 256;         // tokens per page (LoadShard.page_size)
  int32_t max_batch = 64;          // most sequences running (admitted) at once, hence per step
  int32_t max_step_tokens = 2048;  // most tokens fed in a step's first iteration; >= max_batch
  int32_t prefill_chunk = 512;     // most prompt tokens of one sequence per step
  int32_t max_queue = 1024;        // submit refuses while this many wait (preempted ones included)
  int32_t decode_steps = 1;        // decode iterations per step (Step.decode_steps), before capping
  // Speculative decoding: a decoding sequence's step runs its token and decode_steps - 1 draft
  // proposals (all count against max_step_tokens) and returns 1..decode_steps tokens.
  bool speculative = false;
  bool prefix_cache = true;        // reuse cached KV pages of common prefixes (exl3-launch --prefix-cache)
  // Plan the next step while one is in flight (see "Pipelining" above; exl3-launch
  // --step-pipeline). Not with speculative (a round returns a variable number of tokens).
  bool pipeline = false;
};

// Most steps in flight at once: 2 with config.pipeline, else 1.
inline int32_t max_steps_in_flight(const SchedulerConfig& config) { return config.pipeline ? 2 : 1; }

// INVALID_ARGUMENT naming the field unless every field is >= 1 and max_step_tokens >= max_batch
// (every running sequence's decode token always fits a step).
absl::Status validate_scheduler_config(const SchedulerConfig& config);

// One sequence of a step (worker.proto SequenceStep).
struct SequencePlan {
  SeqId seq_id = 0;
  // Tokens to run at positions start_pos, start_pos + 1, ...: a prefill chunk (of the prompt, or of
  // prompt + generated tokens when recomputing after preemption), or the last sampled token.
  // Empty when from_last_sample.
  std::vector<int32_t> tokens;
  int32_t start_pos = 0;
  // Pipelining: the sequence samples in the step in flight before this one; it runs (at start_pos,
  // as its only token) the last token the workers sampled for it there. tokens is empty.
  bool from_last_sample = false;
  // Every physical page the sequence holds, in logical order. Covers start_pos + tokens.size()
  // positions, plus decode_steps - 1 when sample is true (sequences with sample = false run only
  // the first iteration).
  std::vector<int32_t> page_table;
  // Sample after the last token (true for decodes and for the last prefill chunk).
  bool sample = false;
  SamplingParams sampling;
  // Prompt length of the request: positions [0, prompt_len) are prompt, later ones output (for the
  // repetition and presence/frequency penalties). Set on every chunk.
  int32_t prompt_len = 0;
  // On the first chunk after (re)admission when start_pos > 0 (positions reused from the prefix
  // cache): the token ids of positions [0, start_pos), for the worker's history. Empty otherwise.
  std::vector<int32_t> history_prefix;
  // When sample is true: ids banned at this step's first sampled position only (rewind()'s bans
  // of that output position), strictly increasing; empty when there are none.
  std::vector<int32_t> banned_now;
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<SequencePlan> sequences;  // 1..max_batch, distinct seq ids
  int32_t decode_steps = 1;             // 1..config.decode_steps
  // Sequences whose worker-side state (token history) must be dropped before this step runs:
  // finished, cancelled or preempted since the previous plan. Send these first.
  std::vector<SeqId> released;
  // Pages every rank copies, in order, before this step's forward (copy-on-write of prefix reuse,
  // and of rewinds into shared or indexed pages). No page is both a destination and a later
  // source; no destination is referenced elsewhere.
  std::vector<PageCopy> page_copies;
};

// Sampled ids of one sequence, as reported by the workers (worker.proto SequenceTokens).
struct SequenceResult {
  SeqId seq_id = 0;
  std::vector<int32_t> token_ids;
};

struct StepOutcome {
  uint64_t step_id = 0;
  std::vector<SequenceResult> sequences;
};

// What a completed step produced for one sequence.
struct SequenceUpdate {
  SeqId seq_id = 0;
  // Tokens appended to the output, ending at the stopping token when the sequence finished (tokens
  // sampled after a stop in a multi-step decode are dropped).
  std::vector<int32_t> new_tokens;
  // Set when the sequence finished in this step; its pages are already free and it is gone.
  std::optional<FinishReason> finish_reason;
};

enum class SequenceState { kQueued, kRunning };

struct SequenceInfo {
  SequenceState state = SequenceState::kQueued;
  int32_t prompt_len = 0;
  int32_t num_generated = 0;
  int32_t num_computed = 0;  // positions whose KV is written
  int32_t num_pages = 0;
};

struct SchedulerStats {
  int32_t queued = 0;
  int32_t running = 0;
  int32_t free_pages = 0;    // neither held nor cached
  int32_t total_pages = 0;
  int32_t cached_pages = 0;  // held only by the prefix cache (evictable)
  int32_t shared_pages = 0;  // held by more than one owner (sequences, the cache)
  int64_t steps = 0;                       // completed steps
  std::vector<int64_t> batch_size_counts;  // [b] = completed steps with b sequences; size max_batch + 1
  int32_t largest_batch = 0;
  int64_t submitted = 0;
  int64_t completed = 0;  // finished with a FinishReason
  int64_t cancelled = 0;
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;     // prompt tokens of submitted requests
  int64_t generated_tokens = 0;  // tokens appended to outputs
  // Prompt positions run through the model (completed steps) and taken from the prefix cache at
  // admission; a preempted sequence counts again when re-admitted.
  int64_t prompt_tokens_computed = 0;
  int64_t prompt_tokens_reused = 0;
  int64_t rewinds = 0;             // rewind() calls that took effect (banned strings)
  int64_t rewind_page_copies = 0;  // pages rewinds replaced by a private copy (shared or indexed)
};

// Most rewinds of one sequence (banned strings); rewind() refuses more.
inline constexpr int32_t kMaxRewinds = 256;

class Scheduler {
 public:
  // `config` must pass validate_scheduler_config (checked).
  explicit Scheduler(SchedulerConfig config);

  const SchedulerConfig& config() const { return config_; }

  // Queues a request. RESOURCE_EXHAUSTED when max_queue requests already wait, or when the
  // request could never fit the whole cache (prompt + max_new_tokens - 1 positions over
  // num_pages * page_size); INVALID_ARGUMENT when `request` breaks ValidatedRequest's invariants.
  absl::StatusOr<SeqId> submit(ValidatedRequest request);

  // Admits, grows or preempts as described above and plans the next step, or returns nullopt when
  // no sequence can run. Must be called with fewer than max_steps_in_flight(config) steps in
  // flight (checked); with one in flight (pipeline) it plans from the state that step leaves.
  std::optional<StepPlan> next_step();

  bool step_in_flight() const { return !in_flight_.empty(); }
  int32_t steps_in_flight() const { return static_cast<int32_t>(in_flight_.size()); }

  // Feeds back the tokens sampled by the oldest in-flight step. Every sampling sequence of the plan
  // that is still live (and whose entry is not void, see Pipelining) must report 1..decode_steps
  // tokens (the first tokens of its decode iterations); sequences that were cancelled or finished
  // meanwhile, and void entries, are ignored. Returns one update per live sampling sequence, in plan
  // order. On error nothing changes: FAILED_PRECONDITION when no step (or another step) is the
  // oldest in flight, INVALID_ARGUMENT for a malformed outcome (the caller may then abandon_step()).
  absl::StatusOr<std::vector<SequenceUpdate>> complete_step(const StepOutcome& outcome);

  // Forgets the oldest in-flight step without applying it, when its workers failed (cancel_all()
  // then usually follows: restarted workers hold no sequence state). Each sequence keeps its state
  // from before the step (a later in-flight step's entries for them become void).
  void abandon_step();

  // End a live sequence (queued, prefilling or decoding) and release its pages at once (those holding
  // computed KV stay cached when prefix reuse is on). finish() counts it as completed with `reason`
  // (the caller's stop-string check uses kStopString); cancel() as cancelled. NOT_FOUND for an
  // unknown or already ended id. Pages released while a step is in flight are only reused by later
  // steps, which start after that step completes.
  absl::Status finish(SeqId id, FinishReason reason);
  absl::Status cancel(SeqId id);
  // Cancels every live sequence (e.g. when a worker died); returns their ids in arrival order.
  std::vector<SeqId> cancel_all();

  // Banned strings: keeps the first `output_tokens` generated tokens of a live sequence, drops the
  // rest, and bans `banned_token` (which must be the token it generated at output position
  // `output_tokens`) at that position. Legal only while no step is in flight (the serving loop
  // calls it after complete_step), or with pipeline while one is (its entry for the sequence is
  // then void). Errors change nothing: NOT_FOUND for an unknown or ended id (a
  // sequence that finished cannot rewind), FAILED_PRECONDITION while a step is in flight,
  // INVALID_ARGUMENT when output_tokens is not in [0, generated) or banned_token is not the token
  // there, RESOURCE_EXHAUSTED after kMaxRewinds rewinds or when the bans of that position would
  // leave no token of the vocabulary (ValidatedRequest.vocab_size). When no page is available for
  // the copy-on-write the sequence is preempted (recomputed later, counted in preemptions).
  absl::Status rewind(SeqId id, int32_t output_tokens, int32_t banned_token);

  // Moves out the pending releases (next_step() also puts them into the plan); for flushing them
  // to the workers while no step runs.
  std::vector<SeqId> take_released();

  std::optional<SequenceInfo> sequence_info(SeqId id) const;
  // Tokens generated so far (empty for an unknown id).
  std::vector<int32_t> output_tokens(SeqId id) const;
  bool idle() const { return seqs_.empty(); }
  SchedulerStats stats() const;

  // OK, or INTERNAL describing the first broken invariant: every page is free, or held with a
  // reference count equal to the running sequences holding it, or cached (see PrefixCache::check:
  // entries hash their tokens, nothing leaks); a page a sequence holds twice, or one it shares
  // with another that is not full and before both sequences' computed positions, is an error; an
  // indexed page holds the tokens of every sequence holding it, at computed positions only; queued
  // sequences hold no pages; each running sequence's pages cover its computed positions and never
  // exceed what its last position needs; at most max_batch run; rewinds: at most kMaxRewinds per
  // sequence, bans only at output positions it has reached, each list strictly increasing, and a
  // pending rewind copy goes from a held page to a private, unindexed page of a running sequence.
  absl::Status check_invariants() const;

 private:
  struct Sequence {
    ValidatedRequest request;
    std::vector<int32_t> tokens;  // prompt, then generated tokens
    int32_t prompt_len = 0;
    int32_t num_computed = 0;  // positions whose KV is written (tokens[0, num_computed))
    std::vector<int32_t> pages;
    PrefixChain chain;  // its place in the prefix cache's index
    bool running = false;
    bool sent = false;  // in a step since last (re)admission: workers hold state for it
    // Banned strings: ids banned per output position (strictly increasing), and rewinds so far.
    std::map<int32_t, std::vector<int32_t>> bans;
    int32_t rewinds = 0;
    // Bumped by rewinds and requeues: in-flight entries of an older epoch are void.
    uint32_t epoch = 0;

    int32_t num_known() const { return static_cast<int32_t>(tokens.size()); }
    int32_t num_pending() const { return num_known() - num_computed; }
    // Prompt length + max_new_tokens: the sequence ends when it holds this many tokens.
    int32_t token_limit() const { return prompt_len + request.max_new_tokens; }
  };

  struct InFlightEntry {
    SeqId seq_id;
    int32_t start_pos;
    int32_t num_tokens;
    bool sample;
    uint32_t epoch;
  };
  // Where a sequence stands after the in-flight step (pipelining), or now.
  struct Position {
    int32_t computed = 0;
    int32_t known = 0;
    bool from_last_sample = false;  // the token at `computed` is the in-flight step's last sample
    bool ends = false;              // it surely ends in the in-flight step (its token limit)
    int32_t pending() const { return known - computed; }
  };
  struct InFlightStep {
    uint64_t step_id;
    int32_t decode_steps;
    std::vector<InFlightEntry> entries;
    std::vector<SeqId> copied;  // admitted with a page copy of this step
  };

  int32_t reserve_pages(const Sequence& seq) const;
  int32_t step_pages(const Sequence& seq, const Position& at) const;
  // Whether an in-flight entry still applies to its sequence (see Pipelining).
  bool entry_applies(const InFlightEntry& entry, const Sequence& seq) const;
  // `seq` after the newest in-flight step (ahead_), or as it is.
  Position position(SeqId id, const Sequence& seq) const;
  void grow_decodes();
  // True when the head `seq`, which could reuse `reused` positions now, shares more of its tokens
  // with a running sequence still prefilling them.
  bool wait_for_prefix(const Sequence& seq, int32_t reused) const;
  void admit(std::vector<PageCopy>& copies, std::vector<SeqId>& copied);
  // Back to the queue without its pages (preemption; counted by the caller).
  void requeue(SeqId id);
  void preempt(SeqId id);
  void end_sequence(SeqId id);
  // rewind()'s pages: positions from min(num_computed, known - 1) on will be rewritten.
  void rewind_pages(SeqId id, Sequence& seq);
  // Drops the pending rewind copies of `id` (all, or those into pages it no longer holds) and
  // unpins their sources.
  void drop_rewind_copies(SeqId id, bool only_stale);
  std::optional<FinishReason> stop_reason(const Sequence& seq, int32_t token) const;

  SchedulerConfig config_;
  PrefixCache pages_;
  std::map<SeqId, Sequence> seqs_;  // every live sequence
  std::set<SeqId> queue_;           // waiting for admission; FIFO = ascending id (arrival order)
  std::set<SeqId> running_;         // admitted, holding pages
  std::vector<SeqId> released_;
  std::deque<InFlightStep> in_flight_;  // oldest first
  // While next_step() runs with a step in flight: the sequences that step moves.
  std::map<SeqId, Position> ahead_;
  // Copy-on-write of rewinds, for the next plan (the sources are pinned until then).
  std::vector<std::pair<SeqId, PageCopy>> rewind_copies_;
  SeqId next_seq_id_ = 1;
  uint64_t next_step_id_ = 1;

  int64_t steps_ = 0;
  std::vector<int64_t> batch_size_counts_;
  int32_t largest_batch_ = 0;
  int64_t submitted_ = 0;
  int64_t completed_ = 0;
  int64_t cancelled_ = 0;
  int64_t preemptions_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t generated_tokens_ = 0;
  int64_t prompt_tokens_computed_ = 0;
  int64_t prompt_tokens_reused_ = 0;
  int64_t rewinds_ = 0;
  int64_t rewind_page_copies_ = 0;
};

}  // namespace exl3
