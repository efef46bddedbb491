// GPU tests of the CUDA sampler (kernels/cuda/sample.cuh) against the reference sampler
// (kernels/sampling.h): the device Philox bit for bit against the host one; greedy rows exactly
// (ties, penalties, -0 vs +0); admissible sets exactly; sampled tokens equal to sample_ref's in
// >= 99.9% of draws, any difference adjacent in the admissible CDF with u within 1e-9 of the
// boundary; vocabularies 1, 7, 4096, 128256, 152064 and 1, 3, 64 rows; run-to-run determinism.
// The later filters (logit bias, bans, DRY, typical-p, XTC, temperature last) are parameter sets
// of the same checks; XTC at probability 0.5 has its own test (its distribution depends on the
// position).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/sample.cuh"
#include "kernels/philox.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

using testing::DeviceBuffer;

class SampleGpuTest : public testing::CudaTest {};

// ---- Philox ------------------------------------------------------------------------------------

TEST_F(SampleGpuTest, DevicePhiloxMatchesHost) {
  std::vector<PhiloxCounter> counters = {{{0, 0, 0, 0}},
                                         {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
                                         {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}};
  std::vector<PhiloxKey> keys = {{{0, 0}}, {{0xffffffff, 0xffffffff}}, {{0xa4093822, 0x299f31d0}}};
  // Random123's published known answers for the three vectors above.
  const PhiloxCounter kat[] = {{{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
                               {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
                               {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}};
  std::mt19937_64 gen(20240607);
  constexpr int kRandom = 20000;
  std::vector<uint64_t> seeds, positions;
  for (int i = 0; i < kRandom + 3; ++i) {
    if (i >= 3) {
      counters.push_back({{static_cast<uint32_t>(gen()), static_cast<uint32_t>(gen()), static_cast<uint32_t>(gen()),
                           static_cast<uint32_t>(gen())}});
      keys.push_back({{static_cast<uint32_t>(gen()), static_cast<uint32_t>(gen())}});
    }
    // Small, 32-bit-crossing and full 64-bit seeds and positions.
    seeds.push_back(i % 3 == 0 ? static_cast<uint64_t>(i) : gen());
    positions.push_back(i % 4 == 0 ? static_cast<uint64_t>(i) : (i % 4 == 1 ? (1ull << 32) + i : gen()));
  }
  const size_t n = counters.size();
  DeviceBuffer<PhiloxCounter> d_counters(n), d_blocks(n);
  DeviceBuffer<PhiloxKey> d_keys(n);
  DeviceBuffer<uint64_t> d_seeds(n), d_positions(n);
  DeviceBuffer<float> d_uniforms(n);
  d_counters.upload(counters);
  d_keys.upload(keys);
  d_seeds.upload(seeds);
  d_positions.upload(positions);
  launch_philox_check(d_counters.get(), d_keys.get(), d_blocks.get(), d_seeds.get(), d_positions.get(),
                      d_uniforms.get(), static_cast<int64_t>(n), nullptr);
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<PhiloxCounter> blocks = d_blocks.download(n);
  const std::vector<float> uniforms = d_uniforms.download(n);
  for (int k = 0; k < 3; ++k) {
    for (int w = 0; w < 4; ++w) EXPECT_EQ(blocks[k].v[w], kat[k].v[w]) << "known answer " << k << " word " << w;
  }
  int mismatches = 0;
  for (size_t i = 0; i < n && mismatches < 10; ++i) {
    const PhiloxCounter host = philox4x32_10(counters[i], keys[i]);
    const float host_u = philox_uniform(seeds[i], positions[i], kSampleStream);
    bool same = uniforms[i] == host_u;
    for (int w = 0; w < 4; ++w) same = same && blocks[i].v[w] == host.v[w];
    if (!same) {
      ++mismatches;
      ADD_FAILURE() << "item " << i << ": device u " << uniforms[i] << " host u " << host_u << " (seed " << seeds[i]
                    << ", position " << positions[i] << "), word 0 device " << blocks[i].v[0] << " host "
                    << host.v[0];
    }
  }
}

// ---- Rows, the reference and the GPU -----------------------------------------------------------

struct RowCase {
  std::string name;
  SamplingParams params;
  std::vector<float> logits;
  std::vector<int32_t> prompt, output;
};

// The five parameter sets of sample_test.cpp's draw cases, then a greedy set with penalties.
struct ParamSet {
  std::string name;
  SamplingParams params;
  bool penalised;  // takes a history
};

std::vector<ParamSet> param_sets() {
  std::vector<ParamSet> sets;
  auto add = [&](std::string name, bool penalised, auto set) {
    ParamSet s{std::move(name), SamplingParams{}, penalised};
    s.params.seed = 0x5eed0000ull + sets.size();
    set(s.params);
    sets.push_back(std::move(s));
  };
  add("plain", false, [](SamplingParams&) {});
  add("temperature 0.7, top-k 5", false, [](SamplingParams& p) {
    p.temperature = 0.7f;
    p.top_k = 5;
  });
  add("temperature 1.3, top-p 0.8", false, [](SamplingParams& p) {
    p.temperature = 1.3f;
    p.top_p = 0.8f;
  });
  add("min-p 0.1", false, [](SamplingParams& p) { p.min_p = 0.1f; });
  add("everything", true, [](SamplingParams& p) {
    p.temperature = 0.9f;
    p.top_k = 7;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.3f;
  });
  add("greedy, penalties", true, [](SamplingParams& p) {
    p.temperature = 0.0f;
    p.repetition_penalty = 1.2f;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
  });
  // Ids past a small vocabulary are dropped by make_rows; it also bans the row's argmax.
  add("bias, bans", false, [](SamplingParams& p) {
    p.logit_bias = {{3, 2.5f}, {5, -4.0f}, {6, 8.0f}, {100, 7.25f}};
    p.banned_ids = {1, 2, 4000};
  });
  add("DRY, repetition", true, [](SamplingParams& p) {
    p.temperature = 0.8f;
    p.dry_multiplier = 1.5f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 1;
    p.repetition_penalty = 1.1f;
  });
  add("greedy, bias, bans, DRY", true, [](SamplingParams& p) {
    p.temperature = 0.0f;
    p.logit_bias = {{0, 1.5f}, {7, 3.0f}};
    p.banned_ids = {2};
    p.dry_multiplier = 2.0f;
    p.dry_allowed_length = 1;
  });
  add("typical 0.6", false, [](SamplingParams& p) { p.typical_p = 0.6f; });
  add("typical 0.9, top-k 40, temperature last", false, [](SamplingParams& p) {
    p.temperature = 1.5f;
    p.top_k = 40;
    p.typical_p = 0.9f;
    p.temperature_last = true;
  });
  add("XTC 0.05 always", false, [](SamplingParams& p) {
    p.xtc_threshold = 0.05f;
    p.xtc_probability = 1.0f;
  });
  add("temperature last, top-p 0.7, min-p 0.02", false, [](SamplingParams& p) {
    p.temperature = 0.6f;
    p.top_p = 0.7f;
    p.min_p = 0.02f;
    p.temperature_last = true;
  });
  add("all later filters", true, [](SamplingParams& p) {
    p.temperature = 1.2f;
    p.logit_bias = {{1, -1.0f}, {9, 4.0f}};
    p.banned_ids = {3};
    p.dry_multiplier = 0.8f;
    p.dry_allowed_length = 2;
    p.dry_range = 30;
    p.top_p = 0.95f;
    p.typical_p = 0.8f;
    p.xtc_threshold = 0.02f;
    p.xtc_probability = 1.0f;
    p.temperature_last = true;
  });
  return sets;
}

// Logits of several shapes: smooth (normal), quantised to quarters (many exact ties, also at the
// filter boundaries), with masked (-inf) tokens, and flat (large top-p sets).
std::vector<float> make_logits(int64_t vocab, int shape, std::mt19937& gen) {
  std::vector<float> logits(vocab);
  std::normal_distribution<float> normal(0.0f, shape == 3 ? 0.4f : 2.5f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& l : logits) {
    l = normal(gen);
    if (shape == 1) l = std::round(l * 4.0f) / 4.0f;
    if (shape == 2 && unit(gen) < 0.1f) l = -std::numeric_limits<float>::infinity();
  }
  // The sampler's contract needs one finite logit: a masked row keeps its first token.
  if (!std::isfinite(logits[0])) logits[0] = normal(gen);
  // A few strong tokens so that the filters keep small sets in some rows.
  if (vocab > 16 && shape != 3) {
    for (int k = 0; k < 4; ++k) logits[gen() % vocab] = 6.0f + static_cast<float>(k % 2);
  }
  return logits;
}

// Prompt and output ids; half of them among the best tokens, so the penalties change the ranking.
void make_history(RowCase& row, std::mt19937& gen) {
  const int64_t vocab = static_cast<int64_t>(row.logits.size());
  std::vector<int32_t> best(vocab);
  for (int32_t i = 0; i < vocab; ++i) best[i] = i;
  const int64_t top = std::min<int64_t>(vocab, 12);
  std::partial_sort(best.begin(), best.begin() + top, best.end(),
                    [&](int32_t a, int32_t b) { return row.logits[a] > row.logits[b]; });
  auto pick = [&] {
    return gen() % 2 == 0 ? best[gen() % top] : static_cast<int32_t>(gen() % static_cast<uint32_t>(vocab));
  };
  const int prompt_len = static_cast<int>(gen() % 40);
  const int output_len = static_cast<int>(gen() % 20);
  for (int i = 0; i < prompt_len; ++i) row.prompt.push_back(pick());
  for (int i = 0; i < output_len; ++i) {
    // Repeats, so that frequency counts exceed 1.
    row.output.push_back(!row.output.empty() && gen() % 3 == 0 ? row.output[gen() % row.output.size()] : pick());
  }
}

// Drops bias and ban ids outside the row's vocabulary and bans the argmax too when the row has a
// ban list (token 0, the finite one of masked rows, is never banned).
void fit_token_lists(RowCase& row) {
  const int32_t vocab = static_cast<int32_t>(row.logits.size());
  std::erase_if(row.params.logit_bias, [&](const TokenBias& b) { return b.id >= vocab; });
  std::erase_if(row.params.banned_ids, [&](int32_t id) { return id >= vocab || id == 0; });
  if (!row.params.banned_ids.empty()) {
    const int32_t top =
        static_cast<int32_t>(std::max_element(row.logits.begin(), row.logits.end()) - row.logits.begin());
    if (top != 0) row.params.banned_ids.push_back(top);
    std::sort(row.params.banned_ids.begin(), row.params.banned_ids.end());
    row.params.banned_ids.erase(std::unique(row.params.banned_ids.begin(), row.params.banned_ids.end()),
                                row.params.banned_ids.end());
  }
}

// The reference's draw, from a precomputed distribution (sample_ref recomputes and sorts the
// distribution on every call): the first admissible nonzero id whose cumulative exceeds u, in
// ascending id order, the same sequential fp64 sums as sample_ref.
struct HostCdf {
  std::vector<int32_t> ids;
  std::vector<double> cumulative;

  explicit HostCdf(const SampleDistribution& d) {
    double c = 0.0;
    for (size_t id = 0; id < d.probs.size(); ++id) {
      if (!d.admissible[id] || d.probs[id] == 0.0) continue;
      c += d.probs[id];
      ids.push_back(static_cast<int32_t>(id));
      cumulative.push_back(c);
    }
  }
  size_t index_of_draw(double u) const {
    const size_t k = static_cast<size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
    return std::min(k, ids.size() - 1);
  }
  int32_t draw(double u) const { return ids[index_of_draw(u)]; }
  int64_t index_of(int32_t id) const {
    const auto it = std::lower_bound(ids.begin(), ids.end(), id);
    return it != ids.end() && *it == id ? it - ids.begin() : -1;
  }
};

// The rows of one launch on the device: logits and histories uploaded once, positions per launch.
class GpuBatch {
 public:
  GpuBatch(const std::vector<RowCase>& rows, int64_t vocab)
      : rows_(rows),
        vocab_(vocab),
        d_logits_(rows.size() * vocab),
        d_params_(rows.size()),
        d_out_(rows.size()),
        d_admissible_(rows.size() * vocab),
        d_scratch_(sample_scratch_bytes(static_cast<int64_t>(rows.size()), vocab)) {
    std::vector<float> logits;
    std::vector<int32_t> history;
    for (const RowCase& row : rows) {
      EXL3_CHECK_EQ(static_cast<int64_t>(row.logits.size()), vocab);
      logits.insert(logits.end(), row.logits.begin(), row.logits.end());
      history_begin_.push_back(static_cast<int32_t>(history.size()));
      history.insert(history.end(), row.prompt.begin(), row.prompt.end());
      history.insert(history.end(), row.output.begin(), row.output.end());
      bias_begin_.push_back(static_cast<int32_t>(history.size()));
      bias_count_.push_back(append_sample_biases(row.params, row.prompt, row.output, history));
    }
    d_logits_.upload(logits);
    d_history_ = std::make_unique<DeviceBuffer<int32_t>>(history.size());
    if (!history.empty()) d_history_->upload(history);
  }

  // One token per row at positions[row]; the admissible sets too when asked.
  std::vector<int32_t> sample(const std::vector<int64_t>& positions, std::vector<uint8_t>* admissible) {
    std::vector<DeviceSampleRow> params;
    for (size_t r = 0; r < rows_.size(); ++r) {
      const SamplingParams& sp = rows_[r].params;
      DeviceSampleRow d{};
      d.temperature = sp.temperature;
      d.top_k = sp.top_k;
      d.top_p = sp.top_p;
      d.min_p = sp.min_p;
      d.repetition_penalty = sp.repetition_penalty;
      d.presence_penalty = sp.presence_penalty;
      d.frequency_penalty = sp.frequency_penalty;
      d.seed_lo = static_cast<uint32_t>(sp.seed);
      d.seed_hi = static_cast<uint32_t>(sp.seed >> 32);
      d.position = positions[r];
      d.history_begin = history_begin_[r];
      d.prompt_len = static_cast<int32_t>(rows_[r].prompt.size());
      d.output_len = static_cast<int32_t>(rows_[r].output.size());
      d.bias_begin = bias_begin_[r];
      d.bias_count = bias_count_[r];
      d.typical_p = sp.typical_p;
      d.xtc_threshold = sp.xtc_threshold;
      d.xtc_probability = sp.xtc_probability;
      d.temperature_last = sp.temperature_last ? 1 : 0;
      params.push_back(d);
    }
    d_params_.upload(params);
    SampleParams p;
    p.logits = d_logits_.get();
    p.rows = static_cast<int64_t>(rows_.size());
    p.vocab = vocab_;
    p.row_params = d_params_.get();
    p.history = d_history_->get();
    p.out = d_out_.get();
    p.scratch = d_scratch_.get();
    p.admissible = admissible != nullptr ? d_admissible_.get() : nullptr;
    launch_sample(p, nullptr);
    EXL3_CUDA_CHECK(cudaDeviceSynchronize());
    if (admissible != nullptr) *admissible = d_admissible_.download(rows_.size() * vocab_);
    return d_out_.download(rows_.size());
  }

  // Mean time of one launch, for the log.
  double time_us(int iterations) {
    std::vector<int64_t> positions(rows_.size(), 0);
    sample(positions, nullptr);
    cudaEvent_t start, stop;
    EXL3_CUDA_CHECK(cudaEventCreate(&start));
    EXL3_CUDA_CHECK(cudaEventCreate(&stop));
    SampleParams p;
    p.logits = d_logits_.get();
    p.rows = static_cast<int64_t>(rows_.size());
    p.vocab = vocab_;
    p.row_params = d_params_.get();
    p.history = d_history_->get();
    p.out = d_out_.get();
    p.scratch = d_scratch_.get();
    EXL3_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < iterations; ++i) launch_sample(p, nullptr);
    EXL3_CUDA_CHECK(cudaEventRecord(stop));
    EXL3_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    EXL3_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return 1000.0 * ms / iterations;
  }

 private:
  const std::vector<RowCase>& rows_;
  int64_t vocab_;
  std::vector<int32_t> history_begin_, bias_begin_, bias_count_;
  DeviceBuffer<float> d_logits_;
  DeviceBuffer<DeviceSampleRow> d_params_;
  DeviceBuffer<int32_t> d_out_;
  DeviceBuffer<uint8_t> d_admissible_;
  DeviceBuffer<uint8_t> d_scratch_;
  std::unique_ptr<DeviceBuffer<int32_t>> d_history_;
};

// Admissible sets equal, row by row; prints the first differences.
void expect_same_admissible(const std::vector<RowCase>& rows, const std::vector<SampleDistribution>& dists,
                            const std::vector<uint8_t>& gpu, int64_t vocab) {
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t ref_size = 0, gpu_size = 0, shown = 0;
    std::string diffs;
    for (int64_t i = 0; i < vocab; ++i) {
      const bool want = dists[r].admissible[i] != 0;
      const bool got = gpu[r * vocab + i] != 0;
      ref_size += want;
      gpu_size += got;
      if (want != got && shown++ < 8) {
        diffs += " id " + std::to_string(i) + " (logit " + std::to_string(rows[r].logits[i]) + ", ref prob " +
                 std::to_string(dists[r].probs[i]) + ", ref " + (want ? "in" : "out") + ")";
      }
    }
    EXPECT_EQ(shown, 0) << "row " << r << " [" << rows[r].name << "] vocab " << vocab << ": reference keeps "
                        << ref_size << " tokens, GPU " << gpu_size << ";" << diffs;
  }
}

struct DrawStats {
  int64_t sampled = 0, greedy = 0, mismatches = 0;
};

// Tokens of one launch against the reference: greedy exactly; sampled equal, or adjacent in the
// CDF with u within 1e-9 of the boundary between them (counted as mismatches).
void check_tokens(const std::vector<RowCase>& rows, const std::vector<SampleDistribution>& dists,
                  const std::vector<HostCdf>& cdfs, const std::vector<int64_t>& positions,
                  const std::vector<int32_t>& tokens, DrawStats& stats) {
  for (size_t r = 0; r < rows.size(); ++r) {
    const SamplingParams& sp = rows[r].params;
    const int32_t got = tokens[r];
    const int64_t vocab = static_cast<int64_t>(rows[r].logits.size());
    ASSERT_GE(got, 0) << "row " << r;
    ASSERT_LT(got, vocab) << "row " << r;
    if (sp.temperature == 0.0f) {
      ++stats.greedy;
      const int32_t want = static_cast<int32_t>(
          std::find(dists[r].admissible.begin(), dists[r].admissible.end(), uint8_t{1}) - dists[r].admissible.begin());
      ASSERT_EQ(got, want) << "greedy row " << r << " [" << rows[r].name << "]: logit " << rows[r].logits[got]
                           << " vs " << rows[r].logits[want];
      continue;
    }
    ++stats.sampled;
    const double u = philox_uniform(sp.seed, static_cast<uint64_t>(positions[r]), kSampleStream);
    const int32_t want = cdfs[r].draw(u);
    ASSERT_TRUE(dists[r].admissible[got] && dists[r].probs[got] > 0.0)
        << "row " << r << " [" << rows[r].name << "] drew token " << got << " outside the admissible set (prob "
        << dists[r].probs[got] << ") at position " << positions[r];
    if (got == want) continue;
    ++stats.mismatches;
    const int64_t a = cdfs[r].index_of(got), b = cdfs[r].index_of(want);
    const double boundary = cdfs[r].cumulative[std::min(a, b)];
    EXPECT_EQ(std::abs(a - b), 1) << "row " << r << " [" << rows[r].name << "] position " << positions[r] << " u "
                                  << u << ": GPU token " << got << " (CDF index " << a << "), reference " << want
                                  << " (index " << b << ")";
    EXPECT_LE(std::abs(u - boundary), 1e-9) << "row " << r << " u " << u << " boundary " << boundary;
  }
}

// Rows cycling through the parameter sets and logit shapes.
std::vector<RowCase> make_rows(int64_t vocab, int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  const std::vector<ParamSet> sets = param_sets();
  std::vector<RowCase> rows;
  for (int64_t r = 0; r < count; ++r) {
    const ParamSet& set = sets[(r + seed) % sets.size()];
    RowCase row;
    const int shape = static_cast<int>((r / sets.size() + seed) % 4);
    row.name = set.name + ", shape " + std::to_string(shape);
    row.params = set.params;
    row.params.seed ^= static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull;
    row.logits = make_logits(vocab, shape, gen);
    if (set.penalised) make_history(row, gen);
    fit_token_lists(row);
    EXL3_CHECK_OK(validate_sampling_params(row.params, static_cast<int32_t>(vocab)));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<SampleDistribution> reference_distributions(const std::vector<RowCase>& rows) {
  std::vector<SampleDistribution> dists;
  for (const RowCase& row : rows) dists.push_back(sampling_distribution(row.logits, row.params, row.prompt, row.output));
  return dists;
}

TEST_F(SampleGpuTest, MatchesReferenceAcrossShapes) {
  DrawStats total;
  for (int64_t vocab : {1, 7, 4096, 128256, 152064}) {
    for (int64_t count : {1, 3, 64}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + ", rows " + std::to_string(count));
      const std::vector<RowCase> rows = make_rows(vocab, count, static_cast<uint32_t>(vocab * 131 + count));
      const std::vector<SampleDistribution> dists = reference_distributions(rows);
      std::vector<HostCdf> cdfs;
      for (const SampleDistribution& d : dists) cdfs.emplace_back(d);
      GpuBatch batch(rows, vocab);

      std::mt19937_64 gen(static_cast<uint64_t>(vocab) * 7 + count);
      std::vector<int64_t> positions(count);
      for (int64_t& pos : positions) pos = static_cast<int64_t>(gen() % (1ull << 40));

      std::vector<uint8_t> admissible;
      const std::vector<int32_t> first = batch.sample(positions, &admissible);
      expect_same_admissible(rows, dists, admissible, vocab);
      // The host draw is sample_ref's: check it against sample_ref itself once per row.
      for (size_t r = 0; r < rows.size(); ++r) {
        const int32_t ref = sample_ref(rows[r].logits, rows[r].params, rows[r].prompt, rows[r].output, positions[r]);
        const double u = philox_uniform(rows[r].params.seed, static_cast<uint64_t>(positions[r]), kSampleStream);
        const int32_t host = rows[r].params.temperature == 0.0f ? first[r] : cdfs[r].draw(u);
        if (rows[r].params.temperature != 0.0f) ASSERT_EQ(host, ref) << "host draw vs sample_ref, row " << r;
        else ASSERT_EQ(first[r], ref) << "greedy row " << r << " [" << rows[r].name << "] vs sample_ref";
      }
      DrawStats stats;
      check_tokens(rows, dists, cdfs, positions, first, stats);

      // Same inputs, same outputs.
      std::vector<uint8_t> admissible_again;
      EXPECT_EQ(batch.sample(positions, &admissible_again), first) << "not deterministic";
      EXPECT_EQ(admissible_again, admissible) << "admissible sets not deterministic";

      const int launches = count == 1 ? 400 : (count == 3 ? 200 : 32);
      for (int launch = 1; launch < launches && !HasFatalFailure(); ++launch) {
        for (int64_t& pos : positions) pos += 1 + static_cast<int64_t>(gen() % 1000);
        check_tokens(rows, dists, cdfs, positions, batch.sample(positions, nullptr), stats);
      }
      ASSERT_FALSE(HasFatalFailure());
      EXPECT_LE(stats.mismatches * 1000, stats.sampled)
          << stats.mismatches << " of " << stats.sampled << " sampled draws differ from the reference";
      std::printf("vocab %6lld rows %2lld: %5lld sampled draws (%lld differ), %4lld greedy; %.1f us per launch\n",
                  static_cast<long long>(vocab), static_cast<long long>(count), static_cast<long long>(stats.sampled),
                  static_cast<long long>(stats.mismatches), static_cast<long long>(stats.greedy), batch.time_us(10));
      total.sampled += stats.sampled;
      total.mismatches += stats.mismatches;
    }
  }
  EXPECT_GT(total.sampled, 10000);
  EXPECT_LE(total.mismatches * 1000, total.sampled);
}

// ---- Hand-made rows ----------------------------------------------------------------------------

RowCase background_row(std::string name, int64_t vocab, uint32_t seed, float low, float high) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(low, high);
  RowCase row;
  row.name = std::move(name);
  row.logits.resize(vocab);
  for (float& l : row.logits) l = dist(gen);
  return row;
}

// Runs rows through the GPU at a few positions; compares admissible sets and every token.
void expect_rows_match(const std::vector<RowCase>& rows, int64_t vocab, int launches) {
  for (const RowCase& row : rows) EXL3_CHECK_OK(validate_sampling_params(row.params, static_cast<int32_t>(vocab)));
  const std::vector<SampleDistribution> dists = reference_distributions(rows);
  std::vector<HostCdf> cdfs;
  for (const SampleDistribution& d : dists) cdfs.emplace_back(d);
  GpuBatch batch(rows, vocab);
  std::vector<int64_t> positions(rows.size(), 0);
  std::vector<uint8_t> admissible;
  const std::vector<int32_t> tokens = batch.sample(positions, &admissible);
  expect_same_admissible(rows, dists, admissible, vocab);
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(tokens[r], sample_ref(rows[r].logits, rows[r].params, rows[r].prompt, rows[r].output, 0))
        << "row " << r << " [" << rows[r].name << "] vs sample_ref";
  }
  DrawStats stats;
  check_tokens(rows, dists, cdfs, positions, tokens, stats);
  for (int launch = 1; launch < launches; ++launch) {
    for (int64_t& pos : positions) pos = launch;
    check_tokens(rows, dists, cdfs, positions, batch.sample(positions, nullptr), stats);
  }
  EXPECT_LE(stats.mismatches * 1000, stats.sampled);
}

TEST_F(SampleGpuTest, GreedyTiesAndPenalties) {
  for (int64_t vocab : {4096, 152064}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::vector<RowCase> rows;
    auto add = [&](std::string name, auto edit) {
      RowCase row = background_row(std::move(name), vocab, static_cast<uint32_t>(rows.size() + 1), -5.0f, 0.0f);
      row.params.temperature = 0.0f;
      edit(row);
      rows.push_back(std::move(row));
    };
    add("tie far apart", [&](RowCase& r) {
      r.logits[vocab - 5] = 9.0f;
      r.logits[17] = 9.0f;
    });
    add("sample_test greedy", [](RowCase& r) {
      const float l[] = {1.0f, 3.0f, 3.0f, 0.0f, 2.9f};
      std::copy(std::begin(l), std::end(l), r.logits.begin());
    });
    add("repetition 1.1 on prompt {1, 2}", [](RowCase& r) {
      const float l[] = {1.0f, 3.0f, 3.0f, 0.0f, 2.9f};
      std::copy(std::begin(l), std::end(l), r.logits.begin());
      r.params.repetition_penalty = 1.1f;
      r.prompt = {1, 2};
    });
    add("presence 0.05 on output {1}", [](RowCase& r) {
      const float l[] = {1.0f, 3.0f, 3.0f, 0.0f, 2.9f};
      std::copy(std::begin(l), std::end(l), r.logits.begin());
      r.params.presence_penalty = 0.05f;
      r.output = {1};
    });
    add("penalty makes an exact tie", [](RowCase& r) {
      r.logits[30] = 2.0f;
      r.logits[20] = 4.0f;  // 4 / 2 = 2: ties with id 30, id 20 is lower
      r.params.repetition_penalty = 2.0f;
      r.prompt = {20, 20};
    });
    add("negative logit penalised", [](RowCase& r) {
      std::fill(r.logits.begin(), r.logits.end(), -10.0f);
      r.logits[5] = -1.0f;  // * 1.5 = -1.5 < -1.2
      r.logits[6] = -1.2f;
      r.params.repetition_penalty = 1.5f;
      r.output = {5};
    });
    add("-0 and +0 tie", [](RowCase& r) {
      std::fill(r.logits.begin(), r.logits.end(), -std::numeric_limits<float>::infinity());
      r.logits[9] = 0.0f;
      r.logits[7] = -0.0f;
    });
    add("frequency counts", [](RowCase& r) {
      r.logits[100] = 5.0f;  // 5 - 0.1 - 0.5 * 3 = 3.4 < 3.6
      r.logits[200] = 3.6f;
      r.params.presence_penalty = 0.1f;
      r.params.frequency_penalty = 0.5f;
      r.output = {100, 7, 100, 100};
    });
    add("fp64 penalty beside its fp32 rounding", [](RowCase& r) {
      r.logits[50] = 3.0f;  // 3 / 1.1 in fp64
      r.logits[60] = 3.0f / 1.1f;
      r.logits[61] = std::nextafter(3.0f / 1.1f, 0.0f);
      r.logits[62] = std::nextafter(3.0f / 1.1f, 10.0f);
      r.params.repetition_penalty = 1.1f;
      r.prompt = {50, 62};
    });
    add("everything masked but one", [&](RowCase& r) {
      std::fill(r.logits.begin(), r.logits.end(), -std::numeric_limits<float>::infinity());
      r.logits[vocab - 1] = -3.0e38f;
    });
    expect_rows_match(rows, vocab, 2);
  }
}

TEST_F(SampleGpuTest, TiesAtFilterBoundaries) {
  for (int64_t vocab : {7, 4096, 152064}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::vector<RowCase> rows;
    auto add = [&](std::string name, auto edit) {
      RowCase row = background_row(std::move(name), vocab, static_cast<uint32_t>(rows.size() + 100), -8.0f, -3.0f);
      row.params.seed = 1000 + rows.size();
      edit(row);
      rows.push_back(std::move(row));
    };
    const int64_t ties = std::min<int64_t>(vocab, 500);
    auto spread_ties = [&](RowCase& r, float value) {
      for (int64_t k = 0; k < ties; ++k) r.logits[(k * 7919) % vocab] = value;
    };
    add("top-k inside a tie", [&](RowCase& r) {
      spread_ties(r, 5.0f);
      r.params.top_k = static_cast<int32_t>(std::max<int64_t>(1, ties / 5));
    });
    add("top-k inside a tie below the best", [&](RowCase& r) {
      spread_ties(r, 5.0f);
      r.logits[3] = 6.0f;
      r.params.top_k = static_cast<int32_t>(std::max<int64_t>(2, ties / 3));
    });
    add("all equal, top-p 0.8", [&](RowCase& r) {
      std::fill(r.logits.begin(), r.logits.end(), 1.5f);
      r.params.top_p = 0.8f;
    });
    add("top-p inside a tie", [&](RowCase& r) {
      spread_ties(r, 2.0f);
      r.params.top_p = 0.5f;
    });
    add("min-p 1 keeps the tied best", [&](RowCase& r) {
      spread_ties(r, 2.0f);
      r.params.min_p = 1.0f;
    });
    add("top-k then top-p then min-p over ties", [&](RowCase& r) {
      spread_ties(r, 2.0f);
      for (int64_t k = 0; k < ties; k += 3) r.logits[(k * 7919) % vocab] = 1.0f;
      r.params.top_k = static_cast<int32_t>(std::max<int64_t>(1, ties / 2));
      r.params.top_p = 0.9f;
      r.params.min_p = 0.2f;
      r.params.temperature = 0.8f;
    });
    add("top-k 1", [&](RowCase& r) { r.params.top_k = 1; });
    add("tiny top-p", [&](RowCase& r) { r.params.top_p = 1e-6f; });
    add("masked tokens, no filter", [&](RowCase& r) {
      for (int64_t i = 0; i < vocab; i += 2) r.logits[i] = -std::numeric_limits<float>::infinity();
    });
    add("masked tokens, min-p", [&](RowCase& r) {
      for (int64_t i = 0; i < vocab; i += 2) r.logits[i] = -std::numeric_limits<float>::infinity();
      r.params.min_p = 0.01f;
    });
    add("typical inside a tie", [&](RowCase& r) {
      spread_ties(r, 2.0f);
      r.params.typical_p = 0.5f;
    });
    add("XTC over tied top tokens keeps the highest id of them", [&](RowCase& r) {
      spread_ties(r, 5.0f);
      r.params.xtc_threshold = 0.25f / static_cast<float>(ties);
      r.params.xtc_probability = 1.0f;
    });
    add("masked tokens, typical, temperature last", [&](RowCase& r) {
      for (int64_t i = 0; i < vocab; i += 2) r.logits[i] = -std::numeric_limits<float>::infinity();
      r.params.typical_p = 0.7f;
      r.params.temperature = 0.5f;
      r.params.temperature_last = true;
    });
    add("banned ties", [&](RowCase& r) {
      spread_ties(r, 5.0f);
      for (int64_t k = 0; k < ties; k += 2) {
        const int32_t id = static_cast<int32_t>((k * 7919) % vocab);
        if (id != 0) r.params.banned_ids.push_back(id);
      }
      std::sort(r.params.banned_ids.begin(), r.params.banned_ids.end());
      r.params.banned_ids.erase(std::unique(r.params.banned_ids.begin(), r.params.banned_ids.end()),
                                r.params.banned_ids.end());
      if (static_cast<int64_t>(r.params.banned_ids.size()) >= vocab) r.params.banned_ids.pop_back();
      r.params.top_k = 3;
    });
    expect_rows_match(rows, vocab, 50);
  }
}

// XTC at probability 0.5 cuts at some positions only: the admissible set and the token at each
// position against the reference distribution at that position.
TEST_F(SampleGpuTest, XtcAtHalfProbabilityFollowsThePosition) {
  for (int64_t vocab : {7, 4096, 128256}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::mt19937 gen(static_cast<uint32_t>(vocab));
    std::vector<RowCase> rows;
    for (int k = 0; k < 12; ++k) {
      RowCase row;
      row.name = "XTC 0.5, shape " + std::to_string(k % 4);
      row.logits = make_logits(vocab, k % 4, gen);
      row.params.seed = 777 + k;
      row.params.xtc_threshold = 0.02f + 0.01f * k;
      row.params.xtc_probability = 0.5f;
      row.params.typical_p = k % 3 == 0 ? 0.9f : 1.0f;
      row.params.temperature_last = k % 2 == 0;
      EXL3_CHECK_OK(validate_sampling_params(row.params, static_cast<int32_t>(vocab)));
      rows.push_back(std::move(row));
    }
    GpuBatch batch(rows, vocab);
    DrawStats stats;
    int cut = 0;
    for (int64_t launch = 0; launch < 40; ++launch) {
      std::vector<int64_t> positions(rows.size());
      std::vector<SampleDistribution> dists;
      std::vector<HostCdf> cdfs;
      for (size_t r = 0; r < rows.size(); ++r) {
        positions[r] = launch * 1009 + static_cast<int64_t>(r);
        dists.push_back(sampling_distribution(rows[r].logits, rows[r].params, {}, {}, positions[r]));
        cdfs.emplace_back(dists.back());
        cut += philox_uniform(rows[r].params.seed, static_cast<uint64_t>(positions[r]), kXtcStream) < 0.5f;
      }
      std::vector<uint8_t> admissible;
      const std::vector<int32_t> tokens = batch.sample(positions, &admissible);
      expect_same_admissible(rows, dists, admissible, vocab);
      check_tokens(rows, dists, cdfs, positions, tokens, stats);
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_GT(cut, 100);
    EXPECT_LT(cut, 380);
    EXPECT_LE(stats.mismatches * 1000, stats.sampled);
  }
}

}  // namespace
}  // namespace exl3
