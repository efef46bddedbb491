// CUDA token sampler: the device twin of sample_ref / sampling_distribution (kernels/sampling.h),
// on the device, so the engine never copies logits to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling.h"

namespace exl3 {

// Per-row parameters on the device (SamplingParams fields plus the Philox position). A
// zero-initialised tail (typical_p 0, xtc_probability 0, temperature_last 0, logprobs 0,
// bias_count 0) leaves the later filters off.
struct DeviceSampleRow {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  float repetition_penalty;
  float presence_penalty;
  float frequency_penalty;
  uint32_t seed_lo, seed_hi;
  int64_t position;           // Philox counter (the position of the sampled token)
  int32_t history_begin;      // this row's token history in `history`: [begin, begin + prompt + output)
  int32_t prompt_len;
  int32_t output_len;
  // Sparse biases in `history` from word bias_begin: bias_count entries of 3 words, ids strictly
  // increasing: {id, bits of the fp32 bias added first (-inf = banned), bits of the fp32 penalty
  // subtracted after the presence/frequency penalties (DRY)}.
  int32_t bias_begin;
  int32_t bias_count;
  float typical_p;            // on when 0 < typical_p < 1
  float xtc_threshold;
  float xtc_probability;      // on when > 0
  int32_t temperature_last;   // 0 or 1
  int32_t logprobs;           // alternatives to report, 0..kMaxLogprobs
};

// Words of one sparse bias entry in `history`.
inline constexpr int32_t kSampleBiasWords = 3;

// Contract: logits F32 [rows, vocab] (row stride `vocab`), 0 < vocab < 2^31 - 32; row_params
// [rows], each row's SamplingParams validated (validate_sampling_params); history I32 (token ids
// in [0, vocab) and the rows' sparse bias entries; may be null when no row has a history or a
// bias); out I32 [rows]; scratch (8-byte aligned) of sample_scratch_bytes(rows, vocab), reused
// freely between launches; admissible, when not null, U8 [rows, vocab] receives each row's
// admissible set (a test and debug aid; one more pass over the row); logprobs, when not null,
// F32 rows of logprobs_stride >= 1 + 2 · kMaxLogprobs floats receive, for rows with logprobs > 0
// (and vocab < 2^24), token_logprobs_ref of the sampled token laid out as SampleBatch::logprobs
// (kernels/backend.h); other rows are not written. Semantics those of sampling_distribution +
// the inverse-CDF draw of sample_ref: processed logits are the same fp64 values (bias, bans,
// penalties, DRY), so greedy rows return exactly the reference argmax (ties to the lowest id) and
// the top-k ranking is exact; weights are fp64 and sums exact fixed-point or fp64, so sampled rows
// draw from a distribution within fp64 rounding of the reference one (typical-p's scores use the
// device log, within an ulp of the host's). Deterministic: no floating-point atomics, the same
// inputs give the same tokens on every run and every rank.
struct SampleParams {
  const float* logits = nullptr;
  int64_t rows = 0, vocab = 0;
  const DeviceSampleRow* row_params = nullptr;
  const int32_t* history = nullptr;
  int32_t* out = nullptr;
  void* scratch = nullptr;
  uint8_t* admissible = nullptr;
  float* logprobs = nullptr;
  int64_t logprobs_stride = 0;
};
size_t sample_scratch_bytes(int64_t rows, int64_t vocab);

// Appends a row's sparse biases to `words` as DeviceSampleRow::bias_begin describes them (logit
// bias and bans from `params`, DRY penalties from dry_penalties over the history; a banned token's
// bias is -inf) and returns the number of entries. Host code, run by sample() per row.
int32_t append_sample_biases(const SamplingParams& params, std::span<const int32_t> prompt_ids,
                             std::span<const int32_t> output_ids, std::vector<int32_t>& words);
void launch_sample(const SampleParams& p, cudaStream_t stream);

// Test support: the device build of kernels/philox.h (the same constexpr code, compiled by nvcc),
// for known-answer checks against the host. For i < n: blocks[i] = philox4x32_10(counters[i],
// keys[i]) and uniforms[i] = philox_uniform(seeds[i], positions[i], kSampleStream). Device arrays.
void launch_philox_check(const PhiloxCounter* counters, const PhiloxKey* keys, PhiloxCounter* blocks,
                         const uint64_t* seeds, const uint64_t* positions, float* uniforms, int64_t n,
                         cudaStream_t stream);

}  // namespace exl3
