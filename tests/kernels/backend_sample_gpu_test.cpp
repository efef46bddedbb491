// The CUDA backend's sample() (launch_sample behind reserve_sampling and the staged uploads)
// against the CPU backend's sample() (the fp64 twin of sample_ref) on the same seeded cases:
// greedy rows exactly equal, sampled rows equal in at least 99.9% of rows (the GPU draws from a
// distribution within fp64 rounding of the reference one, so a u landing on a rounded CDF
// boundary may flip a draw). The later filters (bias, bans, DRY, typical-p, XTC, temperature
// last) the same way, and logprob rows within 1e-4 absolute of the CPU backend's (ids exactly).
// Also copy_columns() on the device against the CPU backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/sample_cases.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/sampling.h"

namespace exl3 {
namespace {

using testing::SampleCase;

// Wider ranges than the CPU test: more greedy rows, larger top-k, longer histories and positions.
SampleCase make_case(int64_t rows, int64_t vocab, uint32_t seed) {
  return testing::make_sample_case(rows, vocab, seed, testing::SampleCaseRanges{0.25f, 100, 60, 40, 1000000});
}

std::vector<int32_t> run_sample(Backend& be, const SampleCase& c) {
  Tensor logits = *be.allocate(DType::kF32, {c.rows, c.vocab}, "logits");
  Tensor out = *be.allocate(DType::kI32, {c.rows}, "ids");
  be.upload(Tensor::from_vector(c.logits, {c.rows, c.vocab}), logits);
  be.sample(logits, c.batch, out);
  Tensor host = Tensor::zeros(DType::kI32, {c.rows});
  be.download(out, host);
  EXPECT_TRUE(be.synchronize().ok());
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + c.rows);
}

class BackendSampleGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> made = make_cuda_backend(CudaBackendOptions{});
    ASSERT_TRUE(made.ok()) << made.status();
    cuda_ = std::move(*made);
    cpu_ = make_cpu_backend();
  }
  std::unique_ptr<Backend> cuda_, cpu_;
};

TEST_F(BackendSampleGpu, MatchesTheCpuBackend) {
  struct Size {
    int64_t vocab, rows, cases;
  };
  const Size sizes[] = {{1, 5, 2}, {7, 61, 4}, {1000, 97, 6}, {4099, 101, 6}, {32003, 64, 6}, {151936, 33, 3}};
  int64_t greedy = 0, sampled = 0, sampled_differ = 0, greedy_differ = 0;
  int printed = 0;
  uint32_t seed = 100;
  for (const Size& s : sizes) {
    // Reserved once per vocabulary, for the largest case of it; later cases reuse the buffers.
    ASSERT_TRUE(cuda_->reserve_sampling(s.rows, s.vocab, s.rows * 100).ok());
    const uint64_t reserved = cuda_->allocated_bytes();
    for (int64_t k = 0; k < s.cases; ++k, ++seed) {
      const SampleCase c = make_case(s.rows, s.vocab, seed);
      ASSERT_LE(c.batch.history_tokens(), s.rows * 100);
      const std::vector<int32_t> want = run_sample(*cpu_, c);
      const std::vector<int32_t> got = run_sample(*cuda_, c);
      for (int64_t r = 0; r < c.rows; ++r) {
        const SampleRow& row = c.batch.rows[r];
        const bool is_greedy = row.params.temperature == 0.0f;
        (is_greedy ? greedy : sampled) += 1;
        if (got[r] == want[r]) continue;
        (is_greedy ? greedy_differ : sampled_differ) += 1;
        if (printed++ < 10) {
          std::fprintf(stderr,
                       "mismatch vocab %lld case seed %u row %lld: cuda %d cpu %d (temperature %g top_k %d top_p %g "
                       "min_p %g rep %g pres %g freq %g position %lld history %zu+%zu)\n",
                       static_cast<long long>(s.vocab), seed, static_cast<long long>(r), got[r], want[r],
                       row.params.temperature, row.params.top_k, row.params.top_p, row.params.min_p,
                       row.params.repetition_penalty, row.params.presence_penalty, row.params.frequency_penalty,
                       static_cast<long long>(row.position), row.prompt_ids.size(), row.output_ids.size());
        }
      }
    }
    // The per-case logits and ids were freed; the sampler buffers were not reallocated.
    EXPECT_EQ(cuda_->allocated_bytes(), reserved) << "vocab " << s.vocab;
  }
  std::fprintf(stderr, "greedy rows %lld (%lld differ), sampled rows %lld (%lld differ)\n",
               static_cast<long long>(greedy), static_cast<long long>(greedy_differ), static_cast<long long>(sampled),
               static_cast<long long>(sampled_differ));
  EXPECT_GT(greedy, 50);
  EXPECT_GT(sampled, 500);
  EXPECT_EQ(greedy_differ, 0);
  EXPECT_LE(static_cast<double>(sampled_differ), 0.001 * static_cast<double>(sampled));
}

// sample() with a logprobs output; returns the ids and the logprob rows (sentinel 12345 where a
// row asks for none).
std::vector<int32_t> run_sample_logprobs(Backend& be, const SampleCase& c, std::vector<float>& logprobs) {
  Tensor logits = *be.allocate(DType::kF32, {c.rows, c.vocab}, "logits");
  Tensor out = *be.allocate(DType::kI32, {c.rows}, "ids");
  Tensor lp = *be.allocate(DType::kF32, {c.rows, kLogprobWidth}, "logprobs");
  be.upload(Tensor::from_vector(c.logits, {c.rows, c.vocab}), logits);
  be.upload(Tensor::from_vector(std::vector<float>(c.rows * kLogprobWidth, 12345.0f), {c.rows, kLogprobWidth}), lp);
  SampleBatch batch = c.batch;
  batch.logprobs = &lp;
  be.sample(logits, batch, out);
  Tensor host = Tensor::zeros(DType::kI32, {c.rows});
  Tensor host_lp = Tensor::zeros(DType::kF32, {c.rows, kLogprobWidth});
  be.download(out, host);
  be.download(lp, host_lp);
  EXPECT_TRUE(be.synchronize().ok());
  logprobs.assign(host_lp.data<float>(), host_lp.data<float>() + c.rows * kLogprobWidth);
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + c.rows);
}

TEST_F(BackendSampleGpu, MatchesTheCpuBackendWithTheLaterFiltersAndLogprobs) {
  struct Size {
    int64_t vocab, rows, cases;
  };
  const Size sizes[] = {{1, 5, 2}, {7, 61, 4}, {1000, 97, 6}, {4099, 101, 6}, {32003, 64, 6}, {151936, 33, 3}};
  testing::SampleCaseRanges ranges{0.25f, 100, 60, 40, 1000000};
  ranges.extended = true;
  int64_t greedy = 0, sampled = 0, sampled_differ = 0, greedy_differ = 0, logprob_rows = 0;
  double max_logprob_error = 0.0;
  int printed = 0;
  uint32_t seed = 900;
  for (const Size& s : sizes) {
    for (int64_t k = 0; k < s.cases; ++k, ++seed) {
      const SampleCase c = testing::make_sample_case(s.rows, s.vocab, seed, ranges);
      ASSERT_TRUE(cuda_->reserve_sampling(s.rows, s.vocab, c.batch.history_tokens()).ok());
      std::vector<float> want_lp, got_lp;
      const std::vector<int32_t> want = run_sample_logprobs(*cpu_, c, want_lp);
      const std::vector<int32_t> got = run_sample_logprobs(*cuda_, c, got_lp);
      for (int64_t r = 0; r < c.rows; ++r) {
        const SampleRow& row = c.batch.rows[r];
        ASSERT_FALSE(std::binary_search(row.params.banned_ids.begin(), row.params.banned_ids.end(), got[r]))
            << "banned token " << got[r] << " drawn, vocab " << s.vocab << " case seed " << seed << " row " << r;
        const bool is_greedy = row.params.temperature == 0.0f;
        (is_greedy ? greedy : sampled) += 1;
        if (got[r] != want[r]) {
          (is_greedy ? greedy_differ : sampled_differ) += 1;
          if (printed++ < 10) {
            std::fprintf(stderr,
                         "mismatch vocab %lld case seed %u row %lld: cuda %d cpu %d (temperature %g top_k %d top_p %g "
                         "min_p %g typical %g xtc %g/%g last %d dry %g/%g/%d/%d bias %zu bans %zu position %lld)\n",
                         static_cast<long long>(s.vocab), seed, static_cast<long long>(r), got[r], want[r],
                         row.params.temperature, row.params.top_k, row.params.top_p, row.params.min_p,
                         row.params.typical_p, row.params.xtc_threshold, row.params.xtc_probability,
                         row.params.temperature_last ? 1 : 0, row.params.dry_multiplier, row.params.dry_base,
                         row.params.dry_allowed_length, row.params.dry_range, row.params.logit_bias.size(),
                         row.params.banned_ids.size(), static_cast<long long>(row.position));
          }
          continue;  // the logprobs of different tokens differ in their first entry
        }
        const float* w = want_lp.data() + r * kLogprobWidth;
        const float* g = got_lp.data() + r * kLogprobWidth;
        if (row.params.logprobs == 0) {
          for (int64_t j = 0; j < kLogprobWidth; ++j) ASSERT_EQ(g[j], 12345.0f) << "row " << r << " written";
          continue;
        }
        ++logprob_rows;
        const int64_t n = std::min<int64_t>(row.params.logprobs, s.vocab);
        for (int64_t j = 0; j < 1 + 2 * n; ++j) {
          const bool is_id = j > 0 && j % 2 == 1;
          if (is_id) {
            ASSERT_EQ(g[j], w[j]) << "vocab " << s.vocab << " seed " << seed << " row " << r << " alternative " << j / 2;
          } else if (std::isinf(w[j])) {
            ASSERT_EQ(g[j], w[j]) << "row " << r << " entry " << j;
          } else {
            const double err = std::fabs(static_cast<double>(g[j]) - w[j]);
            max_logprob_error = std::max(max_logprob_error, err);
            ASSERT_LE(err, 1e-4) << "vocab " << s.vocab << " seed " << seed << " row " << r << " entry " << j
                                 << ": cuda " << g[j] << " cpu " << w[j];
          }
        }
      }
    }
  }
  std::fprintf(stderr,
               "later filters: greedy rows %lld (%lld differ), sampled rows %lld (%lld differ), logprob rows %lld, "
               "max logprob error %.3g\n",
               static_cast<long long>(greedy), static_cast<long long>(greedy_differ), static_cast<long long>(sampled),
               static_cast<long long>(sampled_differ), static_cast<long long>(logprob_rows), max_logprob_error);
  EXPECT_GT(greedy, 50);
  EXPECT_GT(sampled, 500);
  EXPECT_GT(logprob_rows, 100);
  EXPECT_EQ(greedy_differ, 0);
  EXPECT_LE(static_cast<double>(sampled_differ), 0.001 * static_cast<double>(sampled));
}

// Rows with every penalty off read no history: their histories need no reserved room.
TEST_F(BackendSampleGpu, RowsWithoutPenaltiesNeedNoHistoryRoom) {
  const int64_t rows = 9, vocab = 777;
  SampleCase c = make_case(rows, vocab, 7);
  for (SampleRow& r : c.batch.rows) {
    r.params.repetition_penalty = 1.0f;
    r.params.presence_penalty = 0.0f;
    r.params.frequency_penalty = 0.0f;
  }
  EXPECT_EQ(c.batch.history_tokens(), 0);
  ASSERT_TRUE(cuda_->reserve_sampling(rows, vocab, 0).ok());
  EXPECT_EQ(run_sample(*cuda_, c), run_sample(*cpu_, c));
}

TEST_F(BackendSampleGpu, CopyColumnsMatchesTheCpuBackend) {
  const int64_t rows = 13, cols = 1031;
  const int64_t widths[] = {500, 17, 514};  // three blocks covering the columns, as tensor parallel packs them
  std::vector<Tensor> results;
  for (Backend* be : {cpu_.get(), cuda_.get()}) {
    std::mt19937 local(5);
    Tensor dst = *be->allocate(DType::kF32, {rows, cols}, "dst");
    int64_t column = 0;
    for (const int64_t w : widths) {
      std::vector<float> block(rows * w);
      for (float& v : block) v = std::uniform_real_distribution<float>(-10.0f, 10.0f)(local);
      Tensor src = *be->allocate(DType::kF32, {rows, w}, "src");
      be->upload(Tensor::from_vector(block, {rows, w}), src);
      be->copy_columns(src, dst, column);
      ASSERT_TRUE(be->synchronize().ok());
      column += w;
    }
    Tensor host = Tensor::zeros(DType::kF32, {rows, cols});
    be->download(dst, host);
    results.push_back(host);
  }
  int64_t differ = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (results[0].data<float>()[i] != results[1].data<float>()[i] && differ++ < 5) {
      ADD_FAILURE() << "element " << i << " (row " << i / cols << ", column " << i % cols << "): cuda "
                    << results[1].data<float>()[i] << " cpu " << results[0].data<float>()[i];
    }
  }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace exl3
