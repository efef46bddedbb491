// The CPU backend's sample() (kernels/cpu/sample.cpp) against the reference sampler sample_ref
// (kernels/sampling.h) over many seeded (parameters, seed, position, history) cases, odd vocabulary
// sizes, ties and -inf logits; and its copy_columns() against a plain loop.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sample_cases.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

using testing::SampleCase;

// The CPU test's ranges (the values this test was written with).
SampleCase make_case(int64_t rows, int64_t vocab, uint32_t seed) {
  return testing::make_sample_case(rows, vocab, seed, testing::SampleCaseRanges{});
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

// Every filter at random (bias, bans, DRY, typical, XTC, temperature last) and logprobs: tokens
// equal to sample_ref, logprob rows equal to token_logprobs_ref, rows without logprobs untouched.
TEST(CpuBackendSample, EqualsTheReferenceWithTheLaterFilters) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  testing::SampleCaseRanges ranges;
  ranges.extended = true;
  const int64_t vocabs[] = {1, 2, 7, 129, 1000};
  int64_t checked = 0, with_logprobs = 0;
  uint32_t seed = 500;
  for (const int64_t vocab : vocabs) {
    for (int rep = 0; rep < 8; ++rep, ++seed) {
      const int64_t rows = 1 + seed % 23;
      SampleCase c = testing::make_sample_case(rows, vocab, seed, ranges);
      absl::StatusOr<Tensor> logits = be->allocate(DType::kF32, {rows, vocab}, "logits");
      absl::StatusOr<Tensor> out = be->allocate(DType::kI32, {rows}, "ids");
      absl::StatusOr<Tensor> lp = be->allocate(DType::kF32, {rows, kLogprobWidth}, "logprobs");
      ASSERT_TRUE(logits.ok() && out.ok() && lp.ok());
      be->upload(Tensor::from_vector(c.logits, {rows, vocab}), *logits);
      std::vector<float> sentinel(static_cast<size_t>(rows * kLogprobWidth), 12345.0f);
      be->upload(Tensor::from_vector(sentinel, {rows, kLogprobWidth}), *lp);
      c.batch.logprobs = &*lp;
      be->sample(*logits, c.batch, *out);
      for (int64_t r = 0; r < rows; ++r) {
        const SampleRow& row = c.batch.rows[r];
        const std::span<const float> row_logits(c.logits.data() + r * vocab, vocab);
        const int32_t want = sample_ref(row_logits, row.params, row.prompt_ids, row.output_ids, row.position);
        const int32_t got = out->data<int32_t>()[r];
        ASSERT_EQ(got, want) << "vocab " << vocab << " case seed " << seed << " row " << r;
        ASSERT_FALSE(std::binary_search(row.params.banned_ids.begin(), row.params.banned_ids.end(), got));
        const float* lp_row = lp->data<float>() + r * kLogprobWidth;
        if (row.params.logprobs == 0) {
          for (int64_t j = 0; j < kLogprobWidth; ++j) ASSERT_EQ(lp_row[j], 12345.0f) << "row " << r << " touched";
          continue;
        }
        const TokenLogprobs ref = token_logprobs_ref(row_logits, got, row.params.logprobs);
        const TokenLogprobs read =
            read_logprob_row(lp_row, static_cast<int32_t>(std::min<int64_t>(row.params.logprobs, vocab)));
        ASSERT_EQ(read.logprob, ref.logprob) << "row " << r;
        ASSERT_EQ(read.top.size(), ref.top.size());
        for (size_t j = 0; j < ref.top.size(); ++j) {
          ASSERT_EQ(read.top[j].id, ref.top[j].id) << "row " << r << " alternative " << j;
          ASSERT_EQ(read.top[j].logprob, ref.top[j].logprob) << "row " << r << " alternative " << j;
        }
        ++with_logprobs;
      }
      checked += rows;
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(with_logprobs, 30);
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
