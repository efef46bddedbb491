// Whole-sequence forward in prefill chunks, and logits comparison (KL, top-1).
#include "worker/model/sequence_forward.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace exl3 {

Tensor forward_sequence(const LlamaModel& model, std::span<const int32_t> ids, const SequenceForwardOptions& options) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t pages = std::max<int64_t>(1, (n + options.page_size - 1) / options.page_size);
  KvCache cache(model.cache_shape(pages, options.page_size), model.backend());
  PageTable table;
  EXL3_CHECK_OK(cache.reserve(table, n));
  const int64_t vocab = model.config().vocab_size;
  Tensor logits = Tensor::zeros(DType::kF32, {n, vocab});
  for (int64_t start = 0; start < n; start += options.chunk_size) {
    const int64_t len = std::min(options.chunk_size, n - start);
    Tensor chunk = model.forward(ids.subspan(start, len), static_cast<int32_t>(start), cache, table, LogitsMode::kAll);
    std::copy_n(chunk.data<float>(), len * vocab, logits.mutable_data<float>() + start * vocab);
  }
  return logits;
}

namespace {

std::vector<double> log_softmax(const float* row, int64_t n) {
  const double max = *std::max_element(row, row + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max);
  const double log_sum = std::log(sum) + max;
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = row[i] - log_sum;
  return out;
}

}  // namespace

LogitsComparison compare_logits(const Tensor& reference, const Tensor& ours) {
  EXL3_CHECK(reference.shape() == ours.shape(), "logits shapes differ: ", shape_string(reference.shape()), " vs ",
             shape_string(ours.shape()));
  const int64_t vocab = reference.shape().back();
  const int64_t rows = reference.numel() / vocab;
  LogitsComparison c;
  c.positions = rows;
  int64_t agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = reference.data<float>() + r * vocab;
    const float* b = ours.data<float>() + r * vocab;
    const std::vector<double> lp = log_softmax(a, vocab), lq = log_softmax(b, vocab);
    double kl = 0.0;
    for (int64_t i = 0; i < vocab; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    c.mean_kl += kl;
    c.max_kl = std::max(c.max_kl, kl);
    // Our top token agrees when the reference ranks it first too (a reference stored in bf16 can
    // tie several tokens for first place; any of them counts).
    if (a[std::max_element(b, b + vocab) - b] == *std::max_element(a, a + vocab)) ++agree;
  }
  c.mean_kl /= std::max<int64_t>(rows, 1);
  c.top1_agreement = static_cast<double>(agree) / std::max<int64_t>(rows, 1);
  return c;
}

}  // namespace exl3
