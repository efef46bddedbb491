// Whole-sequence helpers over LlamaModel: run one sequence through a fresh paged cache in
// prefill chunks and collect logits (used by evaluation, logits dumps and tests).
#pragma once

#include <span>

#include "worker/model/llama_model.h"

namespace exl3 {

struct SequenceForwardOptions {
  int64_t chunk_size = 256;  // tokens per prefill forward
  int64_t page_size = 256;   // KV cache page size
};

// Logits F32 [ids.size(), vocab] for every position of one sequence.
Tensor forward_sequence(const LlamaModel& model, std::span<const int32_t> ids, const SequenceForwardOptions& options);

// Mean over positions of KL(p || q) with p, q the softmax of two logits rows [n, vocab], and the
// fraction of positions where our argmax is also a maximum of the reference (a reference kept in
// bf16 ties tokens for first place at some positions; any of the tied tokens agrees).
struct LogitsComparison {
  double mean_kl = 0.0;
  double max_kl = 0.0;
  double top1_agreement = 0.0;
  int64_t positions = 0;
};
LogitsComparison compare_logits(const Tensor& reference, const Tensor& ours);

}  // namespace exl3
