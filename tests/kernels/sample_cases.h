// Seeded batches of sampling rows (random logits with ties and -inf, random parameters and
// histories) for the backend sample() tests on the CPU and on the GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"

namespace exl3::testing {

// How wide the random parameters and histories range.
struct SampleCaseRanges {
  float greedy_fraction = 0.2f;  // rows with temperature 0
  int max_top_k = 50;
  int max_prompt = 40;
  int max_output = 30;
  uint32_t max_position = 100000;
};

// A batch of rows with random logits and parameters; histories are owned here.
struct SampleCase {
  int64_t rows = 0, vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<std::vector<int32_t>> prompts, outputs;
  SampleBatch batch;
};

inline SampleCase make_sample_case(int64_t rows, int64_t vocab, uint32_t seed, const SampleCaseRanges& ranges) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  SampleCase c;
  c.rows = rows;
  c.vocab = vocab;
  c.logits.resize(static_cast<size_t>(rows * vocab));
  const bool ties = (seed % 3) == 0;  // logits on a coarse grid: many exact ties
  for (float& l : c.logits) {
    l = normal(rng);
    if (ties) l = std::round(l * 2.0f) / 2.0f;
    if (unit(rng) < 0.02f) l = -INFINITY;
  }
  c.prompts.resize(rows);
  c.outputs.resize(rows);
  c.batch.rows.resize(rows);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  for (int64_t r = 0; r < rows; ++r) {
    c.logits[r * vocab + id(rng)] = normal(rng);  // at least one finite logit per row
    SamplingParams p;
    p.temperature = unit(rng) < ranges.greedy_fraction ? 0.0f : 0.3f + 1.5f * unit(rng);
    if (unit(rng) < 0.4f) p.top_k = 1 + static_cast<int32_t>(unit(rng) * ranges.max_top_k);
    if (unit(rng) < 0.4f) p.top_p = 0.05f + 0.95f * unit(rng);
    if (unit(rng) < 0.3f) p.min_p = 0.3f * unit(rng);
    if (unit(rng) < 0.4f) p.repetition_penalty = 0.5f + 1.5f * unit(rng);
    if (unit(rng) < 0.3f) p.presence_penalty = -2.0f + 4.0f * unit(rng);
    if (unit(rng) < 0.3f) p.frequency_penalty = -2.0f + 4.0f * unit(rng);
    p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
    EXPECT_TRUE(validate_sampling_params(p, static_cast<int32_t>(vocab)).ok());
    const int prompt_len = static_cast<int>(unit(rng) * ranges.max_prompt);
    const int output_len = static_cast<int>(unit(rng) * ranges.max_output);
    for (int i = 0; i < prompt_len; ++i) c.prompts[r].push_back(id(rng));
    for (int i = 0; i < output_len; ++i) c.outputs[r].push_back(id(rng));
    SampleRow& row = c.batch.rows[r];
    row.params = p;
    row.position = static_cast<int64_t>(rng() % ranges.max_position);
    row.prompt_ids = c.prompts[r];
    row.output_ids = c.outputs[r];
  }
  return c;
}

}  // namespace exl3::testing
