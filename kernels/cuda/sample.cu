// CUDA token sampler (contract in sample.cuh): one block per row, no sort. The row's history marks
// a seen-bitmap and output counts in scratch; penalised logits are recomputed on every pass in the
// reference's fp64 arithmetic, so the argmax and the ranking are exact. Top-k and top-p each keep a
// best-ranked prefix, found by a radix select over order-preserving 64-bit keys (counting tokens
// for top-k, exact fixed-point probability mass for top-p); min-p is a per-token test. The draw
// is a block-wide inverse CDF over the admissible tokens in ascending id order.
#include "kernels/cuda/sample.cuh"

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

// Per-row scratch: output counts (written only at history ids), the seen-bitmap, and the running
// sums of the ordered scan (one per 32-token chunk).
struct ScratchLayout {
  int64_t counts_offset, seen_offset, run_offset, row_bytes;
};

constexpr int64_t align_up(int64_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

ScratchLayout scratch_layout(int64_t vocab) {
  const int64_t chunks = (vocab + kWarpSize - 1) / kWarpSize;
  ScratchLayout l;
  l.counts_offset = 0;
  l.seen_offset = align_up(vocab * static_cast<int64_t>(sizeof(int32_t)));
  l.run_offset = l.seen_offset + align_up(chunks * static_cast<int64_t>(sizeof(uint32_t)));
  l.row_bytes = l.run_offset + align_up(chunks * static_cast<int64_t>(sizeof(double)));
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
  double* run;
  double repetition, presence, frequency, temperature;
  double max_logit;  // penalised, of the argmax; set after the first pass
};

// Steps 1-2 of the reference, operation for operation in fp64 (the _rn intrinsics keep nvcc from
// contracting into an FMA the host reference does not use).
__device__ __forceinline__ double penalised_logit(const Row& r, int64_t i) {
  double x = __ldg(r.logits + i);
  if (((r.seen[i >> 5] >> (i & 31)) & 1u) != 0) {
    x = x > 0.0 ? __ddiv_rn(x, r.repetition) : __dmul_rn(x, r.repetition);
    const int32_t count = r.counts[i];
    if (count > 0) x = __dsub_rn(x, __dadd_rn(r.presence, __dmul_rn(r.frequency, static_cast<double>(count))));
  }
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

// The best-ranked token (largest penalised logit, lowest id among equals).
__device__ int32_t block_argmax(const Row& r, Shared& s, uint64_t& best_key) {
  uint64_t key = 0;
  int32_t id = kEveryId;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < r.vocab; i += kThreads) {
    const uint64_t k = ordered_key(penalised_logit(r, i));
    if (ranks_before(k, static_cast<int32_t>(i), key, id)) {
      key = k;
      id = static_cast<int32_t>(i);
    }
  }
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

// The shortest best-ranked prefix of `domain` whose metric reaches `target`; the metric is the
// token count, or with by_mass the weight. Radix select over the ordered keys, most significant
// byte first: a pass builds a 256-bin histogram (count, exact mass, largest key) of the domain
// tokens that share the bytes fixed so far, then fixes the next byte at the bin where the metric
// reaches the target. It stops when that bin holds one token or all 64 bits are fixed; among equal
// keys the lowest ids come first. If rounding keeps the target out of reach, the whole domain stays.
__device__ Cut find_cut(const Row& r, const Cut& domain, bool by_mass, double target, Shared& s) {
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
        const double logit = penalised_logit(r, i);
        key = ordered_key(logit);
        candidate = in_cut(domain, key, i) && (key & fixed_mask) == prefix;
        if (candidate && by_mass) w = weight_of(r, logit);
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
  const double tie_metric = by_mass ? weight_of(r, key_value(cut_key)) : 1.0;
  int64_t take = bucket;
  if (need <= 0.0) {
    take = 1;
  } else if (tie_metric > 0.0) {
    const double t = ceil(need / tie_metric);
    if (t < static_cast<double>(bucket)) take = t < 1.0 ? 1 : static_cast<int64_t>(t);
  }
  if (take < bucket) {
    const auto is_tie = [&](int64_t i) -> double {
      const uint64_t key = ordered_key(penalised_logit(r, i));
      return key == cut_key && in_cut(domain, key, i) ? 1.0 : 0.0;
    };
    cut.id = ordered_search(r, is_tie, 0.0, static_cast<double>(take) - 0.5, s);
  }
  return cut;
}

// Marks the row's history: seen-bitmap over prompt and output ids, counts over output ids.
__device__ void mark_history(const DeviceSampleRow& rp, const int32_t* history, int64_t vocab, uint32_t* seen,
                             int32_t* counts) {
  const int64_t words = (vocab + 31) / 32;
  for (int64_t w = threadIdx.x; w < words; w += kThreads) seen[w] = 0;
  const int64_t length = static_cast<int64_t>(rp.prompt_len) + rp.output_len;
  const int32_t* ids = length > 0 ? history + rp.history_begin : nullptr;
  for (int64_t j = threadIdx.x; j < length; j += kThreads) counts[ids[j]] = 0;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < length; j += kThreads) {
    const int32_t id = ids[j];
    atomicOr(&seen[id >> 5], 1u << (id & 31));
    if (j >= rp.prompt_len) atomicAdd(&counts[id], 1);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams p, ScratchLayout layout) {
  __shared__ Shared s;
  const int64_t row = blockIdx.x;
  const DeviceSampleRow rp = p.row_params[row];
  char* scratch = static_cast<char*>(p.scratch) + row * layout.row_bytes;
  uint32_t* seen = reinterpret_cast<uint32_t*>(scratch + layout.seen_offset);
  int32_t* counts = reinterpret_cast<int32_t*>(scratch + layout.counts_offset);
  mark_history(rp, p.history, p.vocab, seen, counts);

  Row r;
  r.logits = p.logits + row * p.vocab;
  r.vocab = p.vocab;
  r.seen = seen;
  r.counts = counts;
  r.run = reinterpret_cast<double*>(scratch + layout.run_offset);
  r.repetition = rp.repetition_penalty;
  r.presence = rp.presence_penalty;
  r.frequency = rp.frequency_penalty;
  r.temperature = rp.temperature;
  uint64_t best_key = 0;
  const int32_t best = block_argmax(r, s, best_key);
  r.max_logit = key_value(best_key);
  const bool greedy = rp.temperature == 0.0f;

  // Steps 4-6: two best-ranked prefixes and the min-p test.
  const Cut whole = whole_vocab();
  Cut top_k = whole, top_p = whole;
  bool use_min_p = false;
  double min_p_total = 1.0, min_p_threshold = 0.0;
  if (!greedy) {
    if (rp.top_k > 0 && rp.top_k < p.vocab) top_k = find_cut(r, whole, false, rp.top_k, s);
    if (rp.top_p < 1.0f) {
      const double total = block_mass(r, top_k, whole, s);
      top_p = find_cut(r, top_k, true, static_cast<double>(rp.top_p) * total, s);
    }
    if (rp.min_p > 0.0f) {
      use_min_p = true;
      min_p_total = block_mass(r, top_k, top_p, s);
      min_p_threshold = static_cast<double>(rp.min_p) * (1.0 / min_p_total);  // the best weight is 1
    }
  }
  // Weight of token i if admissible (0 otherwise); `admitted` tells the two apart.
  const auto admissible_weight = [&](int64_t i, bool& admitted) -> double {
    const double logit = penalised_logit(r, i);
    const uint64_t key = ordered_key(logit);
    admitted = in_cut(top_k, key, i) && in_cut(top_p, key, i);
    if (!admitted) return 0.0;
    const double w = weight_of(r, logit);
    if (use_min_p && w / min_p_total < min_p_threshold) admitted = false;
    return admitted ? w : 0.0;
  };

  int32_t token = best;
  if (!greedy) {
    const uint64_t seed = (static_cast<uint64_t>(rp.seed_hi) << 32) | rp.seed_lo;
    const double u = philox_uniform(seed, static_cast<uint64_t>(rp.position), kSampleStream);
    const auto draw_weight = [&](int64_t i) -> double {
      bool admitted = false;
      return admissible_weight(i, admitted);
    };
    const int32_t drawn = ordered_search(r, draw_weight, u, 0.0, s);
    if (drawn >= 0) token = drawn;  // always: the argmax is admissible with weight 1
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
}

__global__ void philox_check_kernel(const PhiloxCounter* counters, const PhiloxKey* keys, PhiloxCounter* blocks,
                                    const uint64_t* seeds, const uint64_t* positions, float* uniforms, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  blocks[i] = philox4x32_10(counters[i], keys[i]);
  uniforms[i] = philox_uniform(seeds[i], positions[i], kSampleStream);
}

}  // namespace

// The planner prices the row array at 64 bytes a row (coordinator/planner/model_footprint.cpp).
static_assert(sizeof(DeviceSampleRow) == 64, "update cuda_sampler_bytes in the planner");

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
  sample_kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p, scratch_layout(p.vocab));
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
