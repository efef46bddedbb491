// Seeded batches of sampling rows (random logits with ties and -inf, random parameters and
// histories) for the backend sample() tests on the CPU and on the GPU.
#pragma once

#include <algorithm>
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
  // Also draw the later filters at random: logit bias, bans, DRY (with repeats in the history),
  // typical-p, XTC, temperature last and logprobs.
  bool extended = false;
};

// The extended parameters of one row: each filter on with some probability. Histories get a
// repeated stretch so that DRY finds matches.
inline void add_extended_params(SamplingParams& p, int64_t vocab, std::mt19937& rng, std::vector<int32_t>& prompt,
                                std::vector<int32_t>& output) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  const auto sorted_ids = [&](int count) {
    std::vector<int32_t> ids;
    for (int i = 0; i < count; ++i) ids.push_back(id(rng));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
  };
  if (unit(rng) < 0.3f) {
    for (int32_t t : sorted_ids(1 + static_cast<int>(unit(rng) * 6))) p.logit_bias.push_back({t, -8.0f + 16.0f * unit(rng)});
  }
  if (unit(rng) < 0.3f && vocab > 1) {
    p.banned_ids = sorted_ids(1 + static_cast<int>(unit(rng) * 4));
    if (static_cast<int64_t>(p.banned_ids.size()) >= vocab) p.banned_ids.pop_back();
  }
  if (unit(rng) < 0.4f) {
    p.dry_multiplier = 0.2f + 2.0f * unit(rng);
    p.dry_base = 1.0f + 2.0f * unit(rng);
    p.dry_allowed_length = 1 + static_cast<int32_t>(unit(rng) * 3);
    if (unit(rng) < 0.3f) p.dry_range = 1 + static_cast<int32_t>(unit(rng) * 40);
    if (unit(rng) < 0.5f) p.dry_breakers = sorted_ids(1 + static_cast<int>(unit(rng) * 3));
    // Repeat a stretch of the prompt at the end of the output.
    if (!prompt.empty()) {
      const size_t begin = static_cast<size_t>(unit(rng) * prompt.size());
      const size_t length = std::min<size_t>(prompt.size() - begin, 1 + static_cast<size_t>(unit(rng) * 6));
      output.insert(output.end(), prompt.begin() + begin, prompt.begin() + begin + length);
    }
  }
  if (unit(rng) < 0.3f) p.typical_p = 0.2f + 0.8f * unit(rng);
  if (unit(rng) < 0.3f) {
    p.xtc_threshold = 0.02f + 0.3f * unit(rng);
    p.xtc_probability = unit(rng) < 0.3f ? 1.0f : unit(rng);
  }
  p.temperature_last = unit(rng) < 0.3f;
  if (unit(rng) < 0.3f) p.logprobs = static_cast<int32_t>(unit(rng) * (kMaxLogprobs + 1));
}

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
    const int prompt_len = static_cast<int>(unit(rng) * ranges.max_prompt);
    const int output_len = static_cast<int>(unit(rng) * ranges.max_output);
    for (int i = 0; i < prompt_len; ++i) c.prompts[r].push_back(id(rng));
    for (int i = 0; i < output_len; ++i) c.outputs[r].push_back(id(rng));
    if (ranges.extended) {
      add_extended_params(p, vocab, rng, c.prompts[r], c.outputs[r]);
      // Keep a finite logit on a token that is not banned.
      int32_t allowed = 0;
      while (std::binary_search(p.banned_ids.begin(), p.banned_ids.end(), allowed)) ++allowed;
      c.logits[r * vocab + allowed] = normal(rng);
    }
    EXPECT_TRUE(validate_sampling_params(p, static_cast<int32_t>(vocab)).ok());
    SampleRow& row = c.batch.rows[r];
    row.params = p;
    row.position = static_cast<int64_t>(rng() % ranges.max_position);
    row.prompt_ids = c.prompts[r];
    row.output_ids = c.outputs[r];
  }
  return c;
}

}  // namespace exl3::testing
