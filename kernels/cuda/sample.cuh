// CUDA token sampler: the device twin of sample_ref / sampling_distribution (kernels/sampling.h),
// one CUDA block per logits row, so the engine never copies logits to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling.h"

namespace exl3 {

// Per-row parameters on the device (SamplingParams fields plus the Philox position).
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
};

// Contract: logits F32 [rows, vocab] (row stride `vocab`), 0 < vocab < 2^31 - 32; row_params
// [rows], each row's SamplingParams validated (validate_sampling_params); history I32 (ids in
// [0, vocab); may be null when every row has an empty history); out I32 [rows]; scratch (8-byte
// aligned) of sample_scratch_bytes(rows, vocab), reused freely between launches; admissible, when
// not null, U8 [rows, vocab] receives each row's admissible set (a test and debug aid; one more
// pass over the row). Semantics those of sampling_distribution + the inverse-CDF draw of
// sample_ref: penalised logits are the same fp64 values, so greedy rows return exactly the
// reference argmax (ties to the lowest id) and the top-k ranking is exact; weights are fp64 and
// sums exact fixed-point or fp64, so sampled rows draw from a distribution within fp64 rounding
// of the reference one. Deterministic: no floating-point atomics, the same inputs give the same
// tokens on every run and every rank.
struct SampleParams {
  const float* logits = nullptr;
  int64_t rows = 0, vocab = 0;
  const DeviceSampleRow* row_params = nullptr;
  const int32_t* history = nullptr;
  int32_t* out = nullptr;
  void* scratch = nullptr;
  uint8_t* admissible = nullptr;
};
size_t sample_scratch_bytes(int64_t rows, int64_t vocab);
void launch_sample(const SampleParams& p, cudaStream_t stream);

// Test support: the device build of kernels/philox.h (the same constexpr code, compiled by nvcc),
// for known-answer checks against the host. For i < n: blocks[i] = philox4x32_10(counters[i],
// keys[i]) and uniforms[i] = philox_uniform(seeds[i], positions[i], kSampleStream). Device arrays.
void launch_philox_check(const PhiloxCounter* counters, const PhiloxKey* keys, PhiloxCounter* blocks,
                         const uint64_t* seeds, const uint64_t* positions, float* uniforms, int64_t n,
                         cudaStream_t stream);

}  // namespace exl3
