// CUDA token sampler (contract in sample.cuh): two kernels, no sort. The first cuts every row into
// kPrepChunks ranges of tokens, one block each: the range's history marks a seen-bitmap and output
// counts in scratch, its sparse biases a second bitmap, and the block leaves the range's best token
// for the second kernel, one block per row, which takes the row's argmax from those (a greedy row is
// done then) and runs the filters and the draw over the whole row. Processed logits
// are recomputed on every pass in the reference's fp64 arithmetic, so the argmax and the ranking
// are exact. Top-k, top-p and typical-p each keep a best prefix of some order, found by a radix
// select over order-preserving 64-bit keys (counting tokens for top-k, exact fixed-point
// probability mass for top-p and typical-p, whose key is minus the token's typicality score);
// min-p and XTC are per-token tests. The draw is a block-wide inverse CDF over the admissible
// tokens in ascending id order; logprobs, when asked, are a log-sum-exp and a top-n selection over
// the raw logits.
#include "kernels/cuda/sample.cuh"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/sample_block.cuh"
#include "kernels/philox.h"

namespace exl3 {
namespace {

using sample_detail::fixed_atomic_add;
using sample_detail::fixed_value;
using sample_detail::Fixed128;
using sample_detail::key_value;
using sample_detail::kFullMask;
using sample_detail::kWarpSize;
using sample_detail::ordered_key;
using sample_detail::warp_inclusive_scan;
using sample_detail::warp_max;
using sample_detail::warp_sum;

// 16 warps: enough to hide the L2 latency of one row's passes while leaving 128 registers per
// thread for the fp64 exp; rows beyond the SM count queue as further blocks.
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kRadixBits = 8;
constexpr int kBins = 1 << kRadixBits;
constexpr int kBinsPerLane = kBins / kWarpSize;
constexpr int kChunkUnroll = 4;
// Up to this many distinct digits in a warp, histogram updates are summed per digit first; each
// summed update costs ~40 warp instructions, a lane's own update a few.
constexpr int kMaxGroupedDigits = 4;  // chunks per step of the ordered scan, for memory-level parallelism
constexpr int32_t kEveryId = 0x7FFFFFFF;
constexpr int64_t kScratchAlign = 256;
// The first kernel's ranges per row (blocks of kThreads): a 128k vocabulary gives ~2k tokens each.
constexpr int kPrepChunks = 64;
static_assert(kPrepChunks <= kThreads, "row_argmax reads one range a thread");

// A range's best token: its key (ordered_key of the processed logit) and id.
struct RangeBest {
  unsigned long long key;
  int32_t id;
  int32_t pad;
};

// Per-row scratch: output counts (written only at history ids), the seen-bitmap, the running
// sums of the ordered scan (one per 32-token chunk), the bitmap of tokens with a sparse bias and
// the best token of each of the first kernel's ranges.
struct ScratchLayout {
  int64_t counts_offset, seen_offset, run_offset, biased_offset, best_offset, row_bytes;
  int64_t range_tokens;  // tokens of a range: a multiple of 32, so a range owns whole bitmap words
};

constexpr int64_t align_up(int64_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

ScratchLayout scratch_layout(int64_t vocab) {
  const int64_t chunks = (vocab + kWarpSize - 1) / kWarpSize;
  ScratchLayout l;
  l.counts_offset = 0;
  l.seen_offset = align_up(vocab * static_cast<int64_t>(sizeof(int32_t)));
  l.run_offset = l.seen_offset + align_up(chunks * static_cast<int64_t>(sizeof(uint32_t)));
  l.biased_offset = l.run_offset + align_up(chunks * static_cast<int64_t>(sizeof(double)));
  l.best_offset = l.biased_offset + align_up(chunks * static_cast<int64_t>(sizeof(uint32_t)));
  l.row_bytes = l.best_offset + align_up(kPrepChunks * static_cast<int64_t>(sizeof(RangeBest)));
  l.range_tokens = (chunks + kPrepChunks - 1) / kPrepChunks * kWarpSize;
  return l;
}

// A best-ranked prefix: tokens whose key is above `key`, and those equal to it up to id `id`.
struct Cut {
  uint64_t key;
  int32_t id;
};
// Every real key is > 0 (only an all-ones NaN maps to 0).
__device__ __forceinline__ Cut whole_vocab() { return Cut{0, kEveryId}; }

__device__ __forceinline__ bool in_cut(const Cut& cut, uint64_t key, int64_t id) {
  return key > cut.key || (key == cut.key && id <= cut.id);
}

// One row. Scratch pointers are plain (no __restrict__ / read-only loads): the block writes them.
struct Row {
  const float* logits;
  int64_t vocab;
  const uint32_t* seen;
  const int32_t* counts;
  const uint32_t* biased;
  const int32_t* bias;  // bias_count entries of kSampleBiasWords words, ids increasing
  int32_t bias_count;
  double* run;
  double repetition, presence, frequency;
  double temperature;  // of the weights in use: the filter temperature, then the final one
  double max_logit;    // processed logit the weights are relative to (their weight is 1)
};

__device__ __forceinline__ bool has_bias(const Row& r, int64_t i) {
  return r.bias_count > 0 && ((r.biased[i >> 5] >> (i & 31)) & 1u) != 0;
}

// The entry of a token whose biased bit is set: binary search over the row's ids.
__device__ __forceinline__ const int32_t* bias_entry(const Row& r, int64_t i) {
  int32_t lo = 0, hi = r.bias_count - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (r.bias[mid * kSampleBiasWords] < i) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return r.bias + lo * kSampleBiasWords;
}

__device__ __forceinline__ bool is_banned(const Row& r, int64_t i) {
  return has_bias(r, i) && __int_as_float(bias_entry(r, i)[1]) == -INFINITY;
}

// Steps 1-4 of the reference, operation for operation in fp64 (the _rn intrinsics keep nvcc from
// contracting into an FMA the host reference does not use): bias (a ban is a -inf bias),
// repetition, presence/frequency, then the DRY penalty.
__device__ __forceinline__ double penalised_logit(const Row& r, int64_t i) {
  double x = __ldg(r.logits + i);
  const int32_t* entry = has_bias(r, i) ? bias_entry(r, i) : nullptr;
  if (entry != nullptr) x = __dadd_rn(x, static_cast<double>(__int_as_float(entry[1])));
  if (((r.seen[i >> 5] >> (i & 31)) & 1u) != 0) {
    x = x > 0.0 ? __ddiv_rn(x, r.repetition) : __dmul_rn(x, r.repetition);
    const int32_t count = r.counts[i];
    if (count > 0) x = __dsub_rn(x, __dadd_rn(r.presence, __dmul_rn(r.frequency, static_cast<double>(count))));
  }
  if (entry != nullptr) x = __dsub_rn(x, static_cast<double>(__int_as_float(entry[2])));
  return x;
}

// Unnormalised probability; the argmax has weight exactly 1.
__device__ __forceinline__ double weight_of(const Row& r, double logit) {
  return exp(__ddiv_rn(__dsub_rn(logit, r.max_logit), r.temperature));
}

struct Shared {
  uint32_t count[kBins];
  Fixed128 mass[kBins];
  unsigned long long max_key[kBins];
  double red[kWarps];
  unsigned long long red_key[kWarps];
  int32_t red_id[kWarps];
  double seg[kWarps];
  double off[kWarps];
  double target, above;
  int32_t bin, warp_sel, chunk, result;
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) % kWarpSize; }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x) / kWarpSize; }

// Deterministic block sum: per-thread sums in a fixed token order, then a fixed tree.
__device__ double block_sum(double v, Shared& s) {
  v = warp_sum(v);
  if (lane_id() == 0) s.red[warp_id()] = v;
  __syncthreads();
  const double total = warp_sum(lane_id() < kWarps ? s.red[lane_id()] : 0.0);
  __syncthreads();
  return total;
}

__device__ __forceinline__ bool ranks_before(uint64_t key_a, int32_t id_a, uint64_t key_b, int32_t id_b) {
  return key_a > key_b || (key_a == key_b && id_a < id_b);
}

__device__ __forceinline__ void warp_argmax(uint64_t& key, int32_t& id) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const uint64_t other_key = __shfl_xor_sync(kFullMask, key, offset);
    const int32_t other_id = __shfl_xor_sync(kFullMask, id, offset);
    if (ranks_before(other_key, other_id, key, id)) {
      key = other_key;
      id = other_id;
    }
  }
}

// Block-wide best of per-thread (key, id) candidates in ranks_before order; every thread gets it.
__device__ int32_t block_best(uint64_t key, int32_t id, Shared& s, uint64_t& best_key) {
  warp_argmax(key, id);
  if (lane_id() == 0) {
    s.red_key[warp_id()] = key;
    s.red_id[warp_id()] = id;
  }
  __syncthreads();
  key = lane_id() < kWarps ? s.red_key[lane_id()] : 0ull;
  id = lane_id() < kWarps ? s.red_id[lane_id()] : kEveryId;
  warp_argmax(key, id);
  __syncthreads();
  best_key = key;
  return id;
}

// The best-ranked token (largest processed logit, lowest id among equals) of tokens [begin, end).
__device__ int32_t block_argmax(const Row& r, int64_t begin, int64_t end, Shared& s, uint64_t& best_key) {
  uint64_t key = 0;
  int32_t id = kEveryId;
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const uint64_t k = ordered_key(penalised_logit(r, i));
    if (ranks_before(k, static_cast<int32_t>(i), key, id)) {
      key = k;
      id = static_cast<int32_t>(i);
    }
  }
  return block_best(key, id, s, best_key);
}

// The row's best-ranked token from the ranges' bests (the first kernel's work).
__device__ int32_t row_argmax(const RangeBest* ranges, Shared& s, uint64_t& best_key) {
  const bool mine = threadIdx.x < kPrepChunks;
  return block_best(mine ? ranges[threadIdx.x].key : 0ull, mine ? ranges[threadIdx.x].id : kEveryId, s, best_key);
}

// The best-ranked (last = false) or the lowest-ranked (last = true) token among those for which
// member(i, logit) holds, or kEveryId when none does. The lowest-ranked is the best of the
// complemented keys and ids (smallest logit, highest id among equals).
template <typename Member>
__device__ int32_t block_ranked_end(const Row& r, const Member& member, bool last, Shared& s) {
  uint64_t key = 0;
  int32_t id = kEveryId;
  for (int64_t i = threadIdx.x; i < r.vocab; i += kThreads) {
    const double logit = penalised_logit(r, i);
    if (!member(i, logit)) continue;
    const uint64_t k = last ? ~ordered_key(logit) : ordered_key(logit);
    const int32_t t = last ? kEveryId - 1 - static_cast<int32_t>(i) : static_cast<int32_t>(i);
    if (ranks_before(k, t, key, id)) {
      key = k;
      id = t;
    }
  }
  uint64_t best_key = 0;
  const int32_t best = block_best(key, id, s, best_key);
  if (best == kEveryId) return kEveryId;
  return last ? kEveryId - 1 - best : best;
}

// Deterministic block sum of value(i) over the vocabulary.
template <typename Value>
__device__ double block_sum_of(const Row& r, const Value& value, Shared& s) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < r.vocab; i += kThreads) sum += value(i);
  return block_sum(sum, s);
}

// Deterministic block maximum.
__device__ double block_max(double v, Shared& s) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmax(v, __shfl_xor_sync(kFullMask, v, offset));
  if (lane_id() == 0) s.red[warp_id()] = v;
  __syncthreads();
  v = lane_id() < kWarps ? s.red[lane_id()] : -INFINITY;
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmax(v, __shfl_xor_sync(kFullMask, v, offset));
  __syncthreads();
  return v;
}

// Total weight of the tokens inside both cuts.
__device__ double block_mass(const Row& r, const Cut& a, const Cut& b, Shared& s) {
  double sum = 0.0;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < r.vocab; i += kThreads) {
    const double logit = penalised_logit(r, i);
    const uint64_t key = ordered_key(logit);
    if (in_cut(a, key, i) && in_cut(b, key, i)) sum += weight_of(r, logit);
  }
  return block_sum(sum, s);
}

// Inverse CDF in ascending id order: the first token with value(i) > 0 whose cumulative value
// exceeds scale · total + offset, or -1 if none does. Warp w owns a contiguous range of 32-token
// chunks; the cumulative value at a token is off[w] + (run[chunk] + in-chunk scan), each term
// computed the same way in the counting pass and in the final search, so the chunk found always
// contains the crossing. Deterministic: a fixed association everywhere.
template <typename Value>
__device__ int32_t ordered_search(const Row& r, const Value& value, double scale, double offset, Shared& s) {
  const int lane = lane_id();
  const int warp = warp_id();
  const int64_t chunks = (r.vocab + kWarpSize - 1) / kWarpSize;
  const int64_t per_warp = (chunks + kWarps - 1) / kWarps;
  const int64_t begin = min(warp * per_warp, chunks);
  const int64_t end = min(begin + per_warp, chunks);
  double running = 0.0;
  for (int64_t c = begin; c < end; c += kChunkUnroll) {
    double v[kChunkUnroll];
#pragma unroll
    for (int u = 0; u < kChunkUnroll; ++u) {
      const int64_t i = (c + u) * kWarpSize + lane;
      v[u] = c + u < end && i < r.vocab ? value(i) : 0.0;
    }
#pragma unroll
    for (int u = 0; u < kChunkUnroll; ++u) {
      if (c + u >= end) break;  // warp-uniform
      const double incl = warp_inclusive_scan(v[u], lane);
      if (lane == 0) r.run[c + u] = running;
      running += __shfl_sync(kFullMask, incl, kWarpSize - 1);
    }
  }
  if (lane == 0) s.seg[warp] = running;
  __syncthreads();
  if (threadIdx.x == 0) {
    double off = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      s.off[w] = off;
      off += s.seg[w];
    }
    const double target = scale * off + offset;
    int found = -1;
    for (int w = 0; w < kWarps && found < 0; ++w) {
      if (target < s.off[w] + s.seg[w]) found = w;
    }
    s.target = target;
    s.warp_sel = found;
    s.chunk = kEveryId;
  }
  __syncthreads();
  const int selected = s.warp_sel;
  if (selected < 0) return -1;
  const double target = s.target;
  const double base = s.off[selected];
  const int64_t chunk_begin = min(selected * per_warp, chunks);
  const int64_t chunk_end = min(chunk_begin + per_warp, chunks);
  for (int64_t c = chunk_begin + threadIdx.x; c < chunk_end; c += kThreads) {
    const double next = c + 1 < chunk_end ? r.run[c + 1] : s.seg[selected];
    if (target < base + next) atomicMin(&s.chunk, static_cast<int32_t>(c));
  }
  __syncthreads();
  if (warp == 0) {
    const int64_t c = s.chunk;
    const int64_t i = c * kWarpSize + lane;
    const double v = i < r.vocab ? value(i) : 0.0;
    const double cumulative = base + (r.run[c] + warp_inclusive_scan(v, lane));
    const unsigned hit = __ballot_sync(kFullMask, v > 0.0 && target < cumulative);
    const unsigned positive = __ballot_sync(kFullMask, v > 0.0);
    // No hit only through rounding inside the chunk: its last positive token then ends the CDF.
    const int pick = hit != 0 ? __ffs(static_cast<int>(hit)) - 1 : kWarpSize - 1 - __clz(static_cast<int>(positive));
    if (lane == 0) s.result = positive != 0 ? static_cast<int32_t>(c * kWarpSize + pick) : -1;
  }
  __syncthreads();
  return s.result;
}

// Warp 0: the first nonempty bin, best bins (highest digit) first, at which above + the running
// metric reaches target; if rounding leaves it out of reach, the last nonempty bin. Writes the
// bin and the metric of the bins before it (plus `above`) to shared memory.
__device__ void select_bin(Shared& s, bool by_mass, double above, double target) {
  const int lane = lane_id();
  double metric[kBinsPerLane];
  double lane_total = 0.0;
#pragma unroll
  for (int k = 0; k < kBinsPerLane; ++k) {
    const int b = kBins - 1 - (lane * kBinsPerLane + k);
    metric[k] = by_mass ? fixed_value(s.mass[b]) : static_cast<double>(s.count[b]);
    lane_total += metric[k];
  }
  const double inclusive = warp_inclusive_scan(lane_total, lane);
  const double exclusive = __shfl_up_sync(kFullMask, inclusive, 1);
  double cumulative = above + (lane == 0 ? 0.0 : exclusive);
  int reach = -1, last = -1;
  double reach_above = 0.0, last_above = 0.0;
#pragma unroll
  for (int k = 0; k < kBinsPerLane; ++k) {
    const int b = kBins - 1 - (lane * kBinsPerLane + k);
    if (s.count[b] == 0) continue;
    const double before = cumulative;
    cumulative = before + metric[k];
    last = b;
    last_above = before;
    if (reach < 0 && cumulative >= target) {
      reach = b;
      reach_above = before;
    }
  }
  const unsigned reached = __ballot_sync(kFullMask, reach >= 0);
  const unsigned nonempty = __ballot_sync(kFullMask, last >= 0);
  if (reached != 0) {
    if (lane == __ffs(static_cast<int>(reached)) - 1) {
      s.bin = reach;
      s.above = reach_above;
    }
  } else if (lane == kWarpSize - 1 - __clz(static_cast<int>(nonempty))) {
    s.bin = last;
    s.above = last_above;
  }
}

// Tokens ordered by processed logit, within `domain` (a best-ranked prefix): the order of top-k
// and top-p. member() gives a token's key (and its logit as `aux`), weight() its filter weight.
struct LogitOrder {
  const Row& r;
  Cut domain;
  __device__ bool member(int64_t i, uint64_t& key, double& aux) const {
    aux = penalised_logit(r, i);
    key = ordered_key(aux);
    return in_cut(domain, key, i);
  }
  __device__ double weight(double aux) const { return weight_of(r, aux); }
  __device__ double tie_weight(uint64_t key, Shared&) const { return weight_of(r, key_value(key)); }
};

// The shortest prefix of `order`'s members (largest key first, lowest ids first among equal keys)
// whose metric reaches `target`; the metric is the token count, or with by_mass the weight. Radix
// select over the 64-bit keys, most significant byte first: a pass builds a 256-bin histogram
// (count, exact mass, largest key) of the members that share the bytes fixed so far, then fixes
// the next byte at the bin where the metric reaches the target. It stops when that bin holds one
// token or all 64 bits are fixed. If rounding keeps the target out of reach, every member stays.
template <typename Order>
__device__ Cut find_cut(const Row& r, const Order& order, bool by_mass, double target, Shared& s) {
  const int lane = lane_id();
  uint64_t prefix = 0;
  double above = 0.0;
  uint64_t cut_key = 0;
  uint32_t bucket = 0;
  for (int shift = 64 - kRadixBits;; shift -= kRadixBits) {
    const uint64_t fixed_mask = shift + kRadixBits >= 64 ? 0ull : ~0ull << (shift + kRadixBits);
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      s.count[b] = 0;
      s.mass[b] = Fixed128{0, 0};
      s.max_key[b] = 0;
    }
    __syncthreads();
    for (int64_t base = static_cast<int64_t>(warp_id()) * kWarpSize; base < r.vocab; base += kThreads) {
      const int64_t i = base + lane;
      bool candidate = false;
      uint64_t key = 0;
      double w = 0.0;
      if (i < r.vocab) {
        double aux = 0.0;
        candidate = order.member(i, key, aux) && (key & fixed_mask) == prefix;
        if (candidate && by_mass) w = order.weight(aux);
      }
      const uint32_t digit = static_cast<uint32_t>(key >> shift) & (kBins - 1);
      // Few distinct digits in the warp (the top bytes of similar logits): one update per digit,
      // summed over its lanes, so that a bin shared by most tokens does not serialise the
      // atomics. Many distinct digits (the lower bytes): each lane updates its own bin.
      unsigned todo = __ballot_sync(kFullMask, candidate);
      if (todo == 0) continue;  // warp-uniform
      const unsigned peers = __match_any_sync(kFullMask, candidate ? digit : kBins + lane);
      const bool leads = candidate && __ffs(static_cast<int>(peers)) - 1 == lane;
      if (__popc(static_cast<int>(__ballot_sync(kFullMask, leads))) > kMaxGroupedDigits) {
        if (candidate) {
          atomicAdd(&s.count[digit], 1u);
          atomicMax(&s.max_key[digit], static_cast<unsigned long long>(key));
          if (by_mass) fixed_atomic_add(&s.mass[digit], w);
        }
        todo = 0;
      }
      while (todo != 0) {
        const int leader = __ffs(static_cast<int>(todo)) - 1;
        const uint32_t d = __shfl_sync(kFullMask, digit, leader);
        const bool mine = candidate && digit == d;
        const unsigned group = __ballot_sync(kFullMask, mine);
        const uint64_t group_max = warp_max(mine ? key : 0ull);
        const double group_mass = by_mass ? warp_sum(mine ? w : 0.0) : 0.0;
        if (lane == leader) {
          atomicAdd(&s.count[d], static_cast<uint32_t>(__popc(static_cast<int>(group))));
          atomicMax(&s.max_key[d], static_cast<unsigned long long>(group_max));
          if (by_mass) fixed_atomic_add(&s.mass[d], group_mass);
        }
        todo &= ~group;
      }
    }
    __syncthreads();
    if (warp_id() == 0) select_bin(s, by_mass, above, target);
    __syncthreads();
    const int bin = s.bin;
    above = s.above;
    prefix |= static_cast<uint64_t>(bin) << shift;
    bucket = s.count[bin];
    const uint64_t bucket_max = s.max_key[bin];
    __syncthreads();  // the histogram is cleared by the next pass
    if (bucket == 1) {
      cut_key = bucket_max;
      break;
    }
    if (shift == 0) {
      cut_key = prefix;
      break;
    }
  }

  // `bucket` tokens share cut_key (and its weight); take the fewest, lowest ids first.
  Cut cut{cut_key, kEveryId};
  const double need = target - above;
  const double tie_metric = by_mass && need > 0.0 && bucket > 1 ? order.tie_weight(cut_key, s) : 1.0;
  int64_t take = bucket;
  if (need <= 0.0) {
    take = 1;
  } else if (tie_metric > 0.0) {
    const double t = ceil(need / tie_metric);
    if (t < static_cast<double>(bucket)) take = t < 1.0 ? 1 : static_cast<int64_t>(t);
  }
  if (take < bucket) {
    const auto is_tie = [&](int64_t i) -> double {
      uint64_t key = 0;
      double aux = 0.0;
      return order.member(i, key, aux) && key == cut_key ? 1.0 : 0.0;
    };
    cut.id = ordered_search(r, is_tie, 0.0, static_cast<double>(take) - 0.5, s);
  }
  return cut;
}

// Marks the row's history (seen-bitmap over prompt and output ids, counts over output ids) and its
// sparse biases (the biased bitmap) for tokens [begin, end) (whole bitmap words: begin a multiple
// of 32); only this block touches those words and counts. Ends synchronised.
__device__ void mark_history_range(const DeviceSampleRow& rp, const int32_t* history, int64_t begin, int64_t end,
                                   uint32_t* seen, int32_t* counts, uint32_t* biased) {
  const int64_t first_word = begin / 32, end_word = (end + 31) / 32;
  const int threads = static_cast<int>(blockDim.x);
  for (int64_t w = first_word + threadIdx.x; w < end_word; w += threads) seen[w] = 0;
  if (rp.bias_count > 0) {
    for (int64_t w = first_word + threadIdx.x; w < end_word; w += threads) biased[w] = 0;
  }
  const int64_t length = static_cast<int64_t>(rp.prompt_len) + rp.output_len;
  const int32_t* ids = length > 0 ? history + rp.history_begin : nullptr;
  const auto mine = [&](int32_t id) { return id >= begin && id < end; };
  for (int64_t j = threadIdx.x; j < length; j += threads) {
    if (mine(ids[j])) counts[ids[j]] = 0;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < length; j += threads) {
    const int32_t id = ids[j];
    if (!mine(id)) continue;
    atomicOr(&seen[id >> 5], 1u << (id & 31));
    if (j >= rp.prompt_len) atomicAdd(&counts[id], 1);
  }
  for (int64_t e = threadIdx.x; e < rp.bias_count; e += threads) {
    const int32_t id = history[rp.bias_begin + e * kSampleBiasWords];
    if (mine(id)) atomicOr(&biased[id >> 5], 1u << (id & 31));
  }
  __syncthreads();
}

// The truncation filters of one row (steps 7-11), decided on the filter weights.
struct Filters {
  Cut top_k{0, kEveryId}, top_p{0, kEveryId};
  bool use_min_p = false;
  double min_p_total = 1.0, min_p_threshold = 0.0;
  bool use_typical = false;
  double typical_total = 1.0, entropy = 0.0;
  Cut typical{0, kEveryId};
  bool xtc_cut = false;
  double xtc_total = 1.0, xtc_threshold = 0.0;
  int32_t xtc_survivor = -1;

  // Through min-p (steps 7-9, bans included); w receives the filter weight when kept.
  __device__ bool kept_a(const Row& r, int64_t i, double logit, double& w) const {
    const uint64_t key = ordered_key(logit);
    if (!in_cut(top_k, key, i) || !in_cut(top_p, key, i) || is_banned(r, i)) return false;
    w = weight_of(r, logit);
    return !(use_min_p && w / min_p_total < min_p_threshold);
  }
  // The typical order's key of a token of filter weight w: minus its score, so the most typical
  // token has the largest key.
  __device__ uint64_t typical_key(double w) const {
    const double p = w / typical_total;
    const double score = p > 0.0 ? fabs(-log(p) - entropy) : INFINITY;
    return ordered_key(-score);
  }
  // Through typical-p (step 10).
  __device__ bool kept_b(const Row& r, int64_t i, double logit, double& w) const {
    if (!kept_a(r, i, logit, w)) return false;
    return !use_typical || in_cut(typical, typical_key(w), i);
  }
  // Through XTC (step 11): every filter.
  __device__ bool kept(const Row& r, int64_t i, double logit, double& w) const {
    if (!kept_b(r, i, logit, w)) return false;
    return !xtc_cut || i == xtc_survivor || !(w / xtc_total >= xtc_threshold);
  }
};

// Tokens kept through min-p, ordered by typicality: the order of typical-p.
struct TypicalOrder {
  const Row& r;
  const Filters& f;
  __device__ bool member(int64_t i, uint64_t& key, double& aux) const {
    const double logit = penalised_logit(r, i);
    if (!f.kept_a(r, i, logit, aux)) return false;
    key = f.typical_key(aux);
    return true;
  }
  __device__ double weight(double aux) const { return aux; }
  // Tokens of one score usually share one logit; take the largest weight among them.
  __device__ double tie_weight(uint64_t key, Shared& s) const {
    double best = 0.0;
    for (int64_t i = threadIdx.x; i < r.vocab; i += kThreads) {
      uint64_t k = 0;
      double w = 0.0;
      if (member(i, k, w) && k == key) best = fmax(best, w);
    }
    return block_max(best, s);
  }
};

// Steps 6-11: the filters of a sampled row; r holds the filter temperature and the argmax.
__device__ Filters decide_filters(const Row& r, const DeviceSampleRow& rp, uint64_t seed, Shared& s) {
  Filters f;
  const Cut whole = whole_vocab();
  if (rp.top_k > 0 && rp.top_k < r.vocab) f.top_k = find_cut(r, LogitOrder{r, whole}, false, rp.top_k, s);
  if (rp.top_p < 1.0f) {
    const double total = block_mass(r, f.top_k, whole, s);
    f.top_p = find_cut(r, LogitOrder{r, f.top_k}, true, static_cast<double>(rp.top_p) * total, s);
  }
  if (rp.min_p > 0.0f) {
    f.use_min_p = true;
    f.min_p_total = block_mass(r, f.top_k, f.top_p, s);
    f.min_p_threshold = static_cast<double>(rp.min_p) * (1.0 / f.min_p_total);  // the best weight is 1
  }
  if (rp.typical_p > 0.0f && rp.typical_p < 1.0f) {
    const auto kept_weight = [&](int64_t i) -> double {
      double w = 0.0;
      return f.kept_a(r, i, penalised_logit(r, i), w) ? w : 0.0;
    };
    f.typical_total = block_sum_of(r, kept_weight, s);
    const double total = f.typical_total;
    const auto plogp = [&](int64_t i) -> double {
      const double p = kept_weight(i) / total;
      return p > 0.0 ? p * log(p) : 0.0;
    };
    f.entropy = -block_sum_of(r, plogp, s);
    f.typical = find_cut(r, TypicalOrder{r, f}, true, static_cast<double>(rp.typical_p) * total, s);
    f.use_typical = true;
  }
  if (rp.xtc_probability > 0.0f && philox_uniform(seed, static_cast<uint64_t>(rp.position), kXtcStream) < rp.xtc_probability) {
    const auto kept_weight = [&](int64_t i) -> double {
      double w = 0.0;
      return f.kept_b(r, i, penalised_logit(r, i), w) ? w : 0.0;
    };
    const double total = block_sum_of(r, kept_weight, s);
    const double threshold = rp.xtc_threshold;
    const auto above = [&](int64_t i) -> double { return kept_weight(i) / total >= threshold ? 1.0 : 0.0; };
    if (block_sum_of(r, above, s) >= 2.0) {
      const auto member = [&](int64_t i, double logit) {
        double w = 0.0;
        return f.kept_b(r, i, logit, w) && w / total >= threshold;
      };
      f.xtc_survivor = block_ranked_end(r, member, true, s);
      f.xtc_total = total;
      f.xtc_threshold = threshold;
      f.xtc_cut = true;
    }
  }
  return f;
}

// Log-probabilities of the raw logits (token_logprobs_ref) of `token`, written as a
// SampleBatch::logprobs row: the max by a block reduction, the log-sum-exp in fp64, the n best
// by n passes that each take the best token ranked after the previous one.
__device__ void write_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t n, float* out, Shared& s) {
  uint64_t key = 0;
  int32_t id = kEveryId;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t k = ordered_key(static_cast<double>(__ldg(logits + i)));
    if (ranks_before(k, static_cast<int32_t>(i), key, id)) {
      key = k;
      id = static_cast<int32_t>(i);
    }
  }
  uint64_t max_key = 0;
  block_best(key, id, s, max_key);
  const double max_logit = key_value(max_key);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) sum += exp(static_cast<double>(__ldg(logits + i)) - max_logit);
  const double log_norm = max_logit + log(block_sum(sum, s));
  if (threadIdx.x == 0) out[0] = static_cast<float>(static_cast<double>(logits[token]) - log_norm);
  const int64_t count = min(static_cast<int64_t>(n), vocab);
  uint64_t prev_key = ~0ull;
  int32_t prev_id = -1;
  for (int64_t j = 0; j < count; ++j) {
    key = 0;
    id = kEveryId;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const uint64_t k = ordered_key(static_cast<double>(__ldg(logits + i)));
      const int32_t t = static_cast<int32_t>(i);
      if (ranks_before(prev_key, prev_id, k, t) && ranks_before(k, t, key, id)) {
        key = k;
        id = t;
      }
    }
    uint64_t pick_key = 0;
    const int32_t pick = block_best(key, id, s, pick_key);
    if (threadIdx.x == 0) {
      out[1 + 2 * j] = static_cast<float>(pick);
      out[2 + 2 * j] = static_cast<float>(static_cast<double>(logits[pick]) - log_norm);
    }
    prev_key = pick_key;
    prev_id = pick;
  }
}

// Row `row` over its scratch (bitmaps and counts as the first kernel marked them).
__device__ Row make_row(const SampleParams& p, const DeviceSampleRow& rp, int64_t row, char* scratch,
                        const ScratchLayout& layout) {
  Row r;
  r.logits = p.logits + row * p.vocab;
  r.vocab = p.vocab;
  r.seen = reinterpret_cast<const uint32_t*>(scratch + layout.seen_offset);
  r.counts = reinterpret_cast<const int32_t*>(scratch + layout.counts_offset);
  r.biased = reinterpret_cast<const uint32_t*>(scratch + layout.biased_offset);
  r.bias = rp.bias_count > 0 ? p.history + rp.bias_begin : nullptr;
  r.bias_count = rp.bias_count;
  r.run = reinterpret_cast<double*>(scratch + layout.run_offset);
  r.repetition = rp.repetition_penalty;
  r.presence = rp.presence_penalty;
  r.frequency = rp.frequency_penalty;
  r.temperature = rp.temperature_last != 0 ? 1.0 : static_cast<double>(rp.temperature);
  return r;
}

// The first kernel: block (row, range) marks the range's history and biases and leaves its best
// token in the row's scratch.
__global__ void __launch_bounds__(kThreads) sample_ranges_kernel(SampleParams p, ScratchLayout layout) {
  __shared__ Shared s;
  const int64_t row = blockIdx.x, range = blockIdx.y;
  const DeviceSampleRow rp = p.row_params[row];
  char* scratch = static_cast<char*>(p.scratch) + row * layout.row_bytes;
  const int64_t begin = range * layout.range_tokens;
  const int64_t end = min(p.vocab, begin + layout.range_tokens);
  if (begin < end) {
    mark_history_range(rp, p.history, begin, end, reinterpret_cast<uint32_t*>(scratch + layout.seen_offset),
                       reinterpret_cast<int32_t*>(scratch + layout.counts_offset),
                       reinterpret_cast<uint32_t*>(scratch + layout.biased_offset));
  }
  uint64_t key = 0;
  const int32_t id = block_argmax(make_row(p, rp, row, scratch, layout), begin, end, s, key);
  if (threadIdx.x == 0) {
    RangeBest* best = reinterpret_cast<RangeBest*>(scratch + layout.best_offset);
    best[range] = RangeBest{key, id, 0};
  }
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams p, ScratchLayout layout) {
  __shared__ Shared s;
  const int64_t row = blockIdx.x;
  const DeviceSampleRow rp = p.row_params[row];
  char* scratch = static_cast<char*>(p.scratch) + row * layout.row_bytes;
  Row r = make_row(p, rp, row, scratch, layout);
  uint64_t best_key = 0;
  const int32_t best = row_argmax(reinterpret_cast<const RangeBest*>(scratch + layout.best_offset), s, best_key);
  r.max_logit = key_value(best_key);
  const bool greedy = rp.temperature == 0.0f;
  const uint64_t seed = (static_cast<uint64_t>(rp.seed_hi) << 32) | rp.seed_lo;

  Filters f;
  Row fin = r;  // the final weights (step 12): relative to the best kept token, at the temperature
  if (!greedy) {
    f = decide_filters(r, rp, seed, s);
    int32_t kept_best = best;  // survives top-k, top-p and min-p
    if (f.xtc_cut) {
      kept_best = f.xtc_survivor;  // every other kept token is less likely
    } else if (f.use_typical) {
      const auto member = [&](int64_t i, double logit) {
        double w = 0.0;
        return f.kept_b(r, i, logit, w);
      };
      const int32_t found = block_ranked_end(r, member, false, s);
      if (found != kEveryId) kept_best = found;  // always: typical-p keeps at least one token
    }
    fin.max_logit = penalised_logit(r, kept_best);
    fin.temperature = rp.temperature;
  }
  const bool same_weights = fin.max_logit == r.max_logit && fin.temperature == r.temperature;
  // Final weight of token i if admissible (0 otherwise); `admitted` tells the two apart.
  const auto admissible_weight = [&](int64_t i, bool& admitted) -> double {
    const double logit = penalised_logit(r, i);
    double w = 0.0;
    admitted = f.kept(r, i, logit, w);
    if (!admitted) return 0.0;
    return same_weights ? w : weight_of(fin, logit);
  };

  int32_t token = best;
  if (!greedy) {
    const double u = philox_uniform(seed, static_cast<uint64_t>(rp.position), kSampleStream);
    const auto draw_weight = [&](int64_t i) -> double {
      bool admitted = false;
      return admissible_weight(i, admitted);
    };
    const int32_t drawn = ordered_search(fin, draw_weight, u, 0.0, s);
    if (drawn >= 0) token = drawn;  // always: the best kept token has weight 1
  }
  if (threadIdx.x == 0) p.out[row] = token;

  if (p.admissible != nullptr) {
    uint8_t* out = p.admissible + row * p.vocab;
    for (int64_t i = threadIdx.x; i < p.vocab; i += kThreads) {
      bool admitted = i == best;
      if (!greedy) admissible_weight(i, admitted);
      out[i] = admitted ? 1 : 0;
    }
  }
  if (p.logprobs != nullptr && rp.logprobs > 0) {
    write_logprobs(r.logits, p.vocab, token, rp.logprobs, p.logprobs + row * p.logprobs_stride, s);
  }
}

__global__ void philox_check_kernel(const PhiloxCounter* counters, const PhiloxKey* keys, PhiloxCounter* blocks,
                                    const uint64_t* seeds, const uint64_t* positions, float* uniforms, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  blocks[i] = philox4x32_10(counters[i], keys[i]);
  uniforms[i] = philox_uniform(seeds[i], positions[i], kSampleStream);
}

}  // namespace

// The planner prices the row array at 88 bytes a row (coordinator/planner/model_footprint.cpp).
static_assert(sizeof(DeviceSampleRow) == 88, "update cuda_sampler_bytes in the planner");

int32_t append_sample_biases(const SamplingParams& params, std::span<const int32_t> prompt_ids,
                             std::span<const int32_t> output_ids, std::vector<int32_t>& words) {
  struct Entry {
    int32_t id;
    float pre, post;
  };
  std::vector<Entry> entries;
  for (const TokenBias& b : params.logit_bias) entries.push_back({b.id, b.bias, 0.0f});
  for (const int32_t id : params.banned_ids) entries.push_back({id, -INFINITY, 0.0f});
  for (const DryPenalty& d : dry_penalties(params, prompt_ids, output_ids)) entries.push_back({d.id, 0.0f, d.penalty});
  // One entry per id: a ban overrides the bias, the DRY penalty joins either.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
  int32_t count = 0;
  for (size_t i = 0; i < entries.size();) {
    Entry merged{entries[i].id, 0.0f, 0.0f};
    for (; i < entries.size() && entries[i].id == merged.id; ++i) {
      merged.pre = merged.pre == -INFINITY || entries[i].pre == -INFINITY ? -INFINITY : merged.pre + entries[i].pre;
      merged.post += entries[i].post;
    }
    words.push_back(merged.id);
    words.push_back(std::bit_cast<int32_t>(merged.pre));
    words.push_back(std::bit_cast<int32_t>(merged.post));
    ++count;
  }
  return count;
}

size_t sample_scratch_bytes(int64_t rows, int64_t vocab) {
  EXL3_CHECK(rows >= 0 && vocab > 0, "rows ", rows, " vocab ", vocab);
  return static_cast<size_t>(rows * scratch_layout(vocab).row_bytes);
}

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  EXL3_CHECK(p.rows >= 0 && p.rows <= 0x7FFFFFFF, "rows ", p.rows);
  EXL3_CHECK(p.vocab > 0 && p.vocab < kEveryId - 32, "vocab ", p.vocab);
  if (p.rows == 0) return;
  EXL3_CHECK(p.logits != nullptr && p.row_params != nullptr && p.out != nullptr && p.scratch != nullptr,
             "null logits, row_params, out or scratch");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(p.scratch) % 8 == 0, "scratch must be 8-byte aligned");
  EXL3_CHECK(p.logprobs == nullptr || (p.logprobs_stride >= 1 + 2 * kMaxLogprobs && p.vocab < (1 << 24)),
             "logprobs stride ", p.logprobs_stride, " vocab ", p.vocab);
  const ScratchLayout layout = scratch_layout(p.vocab);
  sample_ranges_kernel<<<dim3(static_cast<unsigned>(p.rows), kPrepChunks), kThreads, 0, stream>>>(p, layout);
  EXL3_CUDA_CHECK_LAUNCH();
  sample_kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p, layout);
  EXL3_CUDA_CHECK_LAUNCH();
}

void launch_philox_check(const PhiloxCounter* counters, const PhiloxKey* keys, PhiloxCounter* blocks,
                         const uint64_t* seeds, const uint64_t* positions, float* uniforms, int64_t n,
                         cudaStream_t stream) {
  EXL3_CHECK(n >= 0, "n ", n);
  if (n == 0) return;
  EXL3_CHECK(counters != nullptr && keys != nullptr && blocks != nullptr && seeds != nullptr &&
                 positions != nullptr && uniforms != nullptr,
             "null array");
  constexpr int kCheckThreads = 256;
  const int64_t grid = (n + kCheckThreads - 1) / kCheckThreads;
  EXL3_CHECK(grid <= 0x7FFFFFFF, "n ", n);
  philox_check_kernel<<<static_cast<unsigned>(grid), kCheckThreads, 0, stream>>>(counters, keys, blocks, seeds,
                                                                                 positions, uniforms, n);
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
