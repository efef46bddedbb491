// import_gguf: a GGUF file to a Hugging Face-style model directory the runtime loads
// (LlamaModel::load, Tokenizer::from_model_dir): config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json and safetensors (bf16, fp16 or fp32) with Hugging Face
// tensor names, every tensor dequantized to fp32 (gguf_dequant.h), Q/K rows un-permuted
// (qk_permute.h), then cast once. Shards of at most max_shard_bytes with an index when more than one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "import/llama_arch.h"
#include "kernels/tensor.h"

namespace exl3 {

struct ImportOptions {
  DType dtype = DType::kBF16;                     // kBF16, kF16 or kF32
  bool force = false;                             // write into a non-empty out_dir (old shards removed)
  uint64_t max_shard_bytes = uint64_t{4} << 30;   // per safetensors file
  std::function<void(const std::string&)> log;    // progress lines (null: silent)
};

struct ImportSummary {
  int64_t tensors = 0;
  uint64_t bytes = 0;  // safetensors payload written
  int shards = 0;
  std::string tokenizer;  // TokenizerFiles::summary
};

absl::StatusOr<ImportSummary> import_gguf(const std::string& gguf_path, const std::string& out_dir,
                                          const ImportOptions& options);

// One planned tensor as written: dequantized, un-permuted, cast to `dtype`. An fp16 cast of a
// value beyond fp16's range is refused (name and value), never silently made infinite.
absl::StatusOr<Tensor> convert_tensor(const TensorPlan& plan, DType dtype);

}  // namespace exl3
