// The CPU backend's sample() (kernels/cpu/sample.cpp) against the reference sampler sample_ref
// (kernels/sampling.h) over many seeded (parameters, seed, position, history) cases, odd vocabulary
// sizes, ties and -inf logits; and its copy_columns() against a plain loop.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

// A batch of rows with random logits and parameters; histories are owned here.
struct SampleCase {
  int64_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<std::vector<int32_t>> prompts, outputs;
  SampleBatch batch;
};

SampleCase make_case(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  SampleCase c;
  c.vocab = vocab;
  c.logits.resize(static_cast<size_t>(rows * vocab));
  const bool ties = (seed % 3) == 0;  // logits rounded to a coarse grid: many exact ties
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
    // Each row keeps at least one finite logit.
    c.logits[r * vocab + id(rng)] = normal(rng);
    SamplingParams p;
    const float kind = unit(rng);
    p.temperature = kind < 0.2f ? 0.0f : 0.3f + 1.5f * unit(rng);
    if (unit(rng) < 0.4f) p.top_k = 1 + static_cast<int32_t>(unit(rng) * 50);
    if (unit(rng) < 0.4f) p.top_p = 0.05f + 0.95f * unit(rng);
    if (unit(rng) < 0.3f) p.min_p = 0.3f * unit(rng);
    if (unit(rng) < 0.4f) p.repetition_penalty = 0.5f + 1.5f * unit(rng);
    if (unit(rng) < 0.3f) p.presence_penalty = -2.0f + 4.0f * unit(rng);
    if (unit(rng) < 0.3f) p.frequency_penalty = -2.0f + 4.0f * unit(rng);
    p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
    EXPECT_TRUE(validate_sampling_params(p, static_cast<int32_t>(vocab)).ok());
    const int prompt_len = static_cast<int>(unit(rng) * 40), output_len = static_cast<int>(unit(rng) * 30);
    for (int i = 0; i < prompt_len; ++i) c.prompts[r].push_back(id(rng));
    for (int i = 0; i < output_len; ++i) c.outputs[r].push_back(id(rng));
    SampleRow& row = c.batch.rows[r];
    row.params = p;
    row.position = static_cast<int64_t>(rng() % 100000);
    row.prompt_ids = c.prompts[r];
    row.output_ids = c.outputs[r];
  }
  return c;
}

TEST(CpuBackendSample, EqualsTheReferenceForManyCases) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const int64_t vocabs[] = {1, 2, 7, 129, 1000, 4099};
  int64_t checked = 0, greedy = 0;
  uint32_t seed = 1;
  for (const int64_t vocab : vocabs) {
    for (int rep = 0; rep < 6; ++rep, ++seed) {
      const int64_t rows = 1 + seed % 17;
      const SampleCase c = make_case(rows, vocab, seed);
      ASSERT_TRUE(be->reserve_sampling(rows, vocab, c.batch.history_tokens()).ok());
      absl::StatusOr<Tensor> logits = be->allocate(DType::kF32, {rows, vocab}, "logits");
      absl::StatusOr<Tensor> out = be->allocate(DType::kI32, {rows}, "ids");
      ASSERT_TRUE(logits.ok() && out.ok());
      be->upload(Tensor::from_vector(c.logits, {rows, vocab}), *logits);
      be->sample(*logits, c.batch, *out);
      Tensor host = Tensor::zeros(DType::kI32, {rows});
      be->download(*out, host);
      for (int64_t r = 0; r < rows; ++r) {
        const SampleRow& row = c.batch.rows[r];
        const int32_t want = sample_ref(std::span<const float>(c.logits.data() + r * vocab, vocab), row.params,
                                        row.prompt_ids, row.output_ids, row.position);
        ASSERT_EQ(host.data<int32_t>()[r], want)
            << "vocab " << vocab << " case seed " << seed << " row " << r << " temperature " << row.params.temperature
            << " top_k " << row.params.top_k << " top_p " << row.params.top_p << " min_p " << row.params.min_p
            << " position " << row.position;
        ++checked;
        greedy += row.params.temperature == 0.0f;
      }
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(greedy, 20);
}

TEST(CpuBackendSample, SameInputsGiveTheSameTokensAndPositionsChangeThem) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const int64_t rows = 64, vocab = 513;
  SampleCase c = make_case(rows, vocab, 4242);
  for (SampleRow& r : c.batch.rows) {
    r.params = SamplingParams{};  // temperature 1, no filters: draws depend on the position
    r.params.seed = 99;
  }
  absl::StatusOr<Tensor> logits = be->allocate(DType::kF32, {rows, vocab}, "logits");
  absl::StatusOr<Tensor> out = be->allocate(DType::kI32, {rows}, "ids");
  ASSERT_TRUE(logits.ok() && out.ok());
  be->upload(Tensor::from_vector(c.logits, {rows, vocab}), *logits);
  auto draw = [&]() {
    be->sample(*logits, c.batch, *out);
    Tensor host = Tensor::zeros(DType::kI32, {rows});
    be->download(*out, host);
    return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + rows);
  };
  const std::vector<int32_t> first = draw();
  EXPECT_EQ(draw(), first);
  for (SampleRow& r : c.batch.rows) r.position += 1;
  const std::vector<int32_t> moved = draw();
  int differ = 0;
  for (int64_t r = 0; r < rows; ++r) differ += moved[r] != first[r];
  EXPECT_GT(differ, 0) << "a new position must give new draws somewhere in 64 rows";
}

TEST(CpuBackendSample, CopyColumnsPlacesABlock) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const int64_t rows = 5, cols = 11, width = 3, column = 7;
  std::vector<float> src(rows * width);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  absl::StatusOr<Tensor> s = be->allocate(DType::kF32, {rows, width}, "src");
  absl::StatusOr<Tensor> d = be->allocate(DType::kF32, {rows, cols}, "dst");
  ASSERT_TRUE(s.ok() && d.ok());
  be->upload(Tensor::from_vector(src, {rows, width}), *s);
  be->copy_columns(*s, *d, column);
  Tensor host = Tensor::zeros(DType::kF32, {rows, cols});
  be->download(*d, host);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      const float want = j >= column && j < column + width ? src[r * width + j - column] : 0.0f;
      EXPECT_EQ(host.data<float>()[r * cols + j], want) << "row " << r << " column " << j;
    }
  }
}

}  // namespace
}  // namespace exl3
