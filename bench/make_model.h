// exl3-bench make-model: writes a complete EXL3 model directory (config.json with
// quantization_config, quantization_config.json, generation_config.json, tokenizer files,
// model*.safetensors shards and their index) with random but valid tensors for a named shape, so
// benchmarks can run real-sized models without converting one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/model_plan.h"

namespace exl3 {

struct MakeModelOptions {
  ModelPlanOptions plan;
  std::string out_dir;
  int threads = 0;              // 0 = every core
  uint64_t shard_mib = 8192;    // a new shard starts when the next module would pass this
  std::string tokenizer_path;   // copy this tokenizer.json; empty = write a synthetic one
  bool overwrite = false;       // replace the model files of an existing model directory
  std::FILE* log = nullptr;     // progress and summary lines (stderr in the tool); null = quiet
};

struct MakeModelReport {
  std::vector<std::string> files;        // safetensors files written, in order
  uint64_t bytes = 0;                    // safetensors bytes written (headers included)
  int64_t num_layers = 0;
  double decoder_bits = 0.0;             // achieved mean K of the decoder
  std::map<int, int> linears_per_bits;   // decoder K -> number of linears
  std::map<std::string, int> linears_per_codebook;  // over decoder and head
  double seconds = 0.0;                  // safetensors writing time
};

absl::StatusOr<MakeModelReport> make_model(const MakeModelOptions& options);

// Human-readable summary of a finished run (a few lines).
std::string format_make_model_report(const MakeModelOptions& options, const MakeModelReport& report);

}  // namespace exl3
