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

// Contract: logits F32 [rows, vocab] (row stride `vocab`), vocab > 0; rows_params [rows];
// history I32 (ids in [0, vocab)); out I32 [rows]; scratch as sample_scratch_bytes(rows, vocab).
// Semantics exactly those of sampling_distribution + the inverse-CDF draw of sample_ref, but in
// fp32: greedy rows return the same argmax (ties to the lowest id) as the reference; sampled rows
// draw from a distribution within fp32 rounding of the reference one.
struct SampleParams {
  const float* logits = nullptr;
  int64_t rows = 0, vocab = 0;
  const DeviceSampleRow* row_params = nullptr;
  const int32_t* history = nullptr;
  int32_t* out = nullptr;
  void* scratch = nullptr;
};
size_t sample_scratch_bytes(int64_t rows, int64_t vocab);
void launch_sample(const SampleParams& p, cudaStream_t stream);

}  // namespace exl3
