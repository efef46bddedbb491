// exl3-bench model: loads a model on one device (CPU or CUDA backend), or sharded over several
// ranks as threads of this process (tensor parallel or a layer split, planned by the real planner,
// over Gloo or NCCL), and measures prefill tokens/s per prompt length and decode tokens/s per batch
// size through the Engine (greedy sampling on the backend), with a memory roofline per decode row:
// bytes read per step (weights held by the backends plus the KV cache read by attention) against a
// copy bandwidth measured in the same run (times the GPU count when the ranks are GPUs).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace CLI {
class App;
}

namespace exl3 {

struct ModelBenchOptions {
  std::string model_dir;
  std::string backend = "cpu";                  // "cpu" or "cuda"
  int device = 0;                               // CUDA device
  std::vector<int64_t> prefill = {128, 512, 2048};
  std::vector<int64_t> batch = {1, 4, 16, 32, 64};
  int decode_steps = 32;                        // measured decode steps per batch size
  int warmup = 2;                               // unmeasured runs before each measurement
  int prefill_repeats = 3;                      // measured prefill runs per length (mean reported)
  int64_t decode_prompt = 32;                   // prompt tokens of every decode sequence
  int64_t decode_prompt_chunk = 2048;           // most prompt tokens of the decode sequences in one step
  int64_t page_size = 256;                      // KV cache page size
  std::string cache_bits = "16,16";             // --cache-bits K,V (worker/kv_cache_bits.h)
  bool step_graphs = true;                      // decode steps replay CUDA graphs (EngineOptions::step_graphs)
  std::string int8_activations = "off";         // --int8-activations off|auto|on (kernels/int8_activations.h)
  // Several ranks: threads of this process, each with its backend, communicator and shard.
  int ranks = 1;                                // 1 = the whole model on `device`
  std::vector<int> devices;                     // CUDA device of each rank (empty: 0 .. ranks - 1)
  std::vector<double> split;                    // planner caps per rank, GiB (empty: equal, an even split)
  std::string mode = "tp";                      // tp | layers
  std::string all_reduce = "nccl";              // nccl | oneshot (CUDA ranks)
  int all_reduce_oneshot_max_kib = 256;         // oneshot: the largest part that goes one-shot
  std::string json_path;                        // empty = no JSON file
  std::string markdown_path;                    // empty = no markdown file
  std::vector<std::string> argv;                // the command line, recorded in the environment
  std::FILE* log = nullptr;                     // progress lines (stderr in the tool); null = quiet
};

struct ModelBenchModelInfo {
  std::string name;          // model directory's base name
  std::string architecture;
  int64_t hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0,
          vocab_size = 0;
  double decoder_bpw = 0.0;          // mean K of the EXL3 decoder linears (0: unquantized)
  uint64_t stored_bytes = 0;         // bytes of the stored tensors (summed over ranks)
  uint64_t weight_bytes = 0;         // bytes the backends hold for weights (host embedding excluded;
                                     // summed over ranks, replicated tensors once per rank)
  uint64_t exl3_weights = 0;         // sum of k·n over the EXL3 linears (decoder and head)
};

struct PrefillRow {
  int64_t tokens = 0;        // prompt length, run as one chunk
  double seconds = 0.0;      // mean time of one prefill
  double tokens_per_s = 0.0;
};

struct DecodeRow {
  int64_t batch = 0;
  int steps = 0;                       // measured steps
  double mean_context = 0.0;           // mean positions attended per sequence per step
  double step_ms = 0.0;                // mean time of one decode step (B tokens)
  double tokens_per_s = 0.0;
  uint64_t weight_bytes = 0;           // read per step
  uint64_t kv_bytes = 0;               // read per step (mean over the measured steps)
  double gbs = 0.0;                    // (weight + kv bytes) / step time, 1e9 bytes/s
  double copy_fraction = 0.0;          // gbs / copy bandwidth
  std::optional<double> exl3_weights_per_ms;  // batch 1 only: EXL3 weights decoded per ms
};

struct ModelBenchResult {
  nlohmann::json environment;  // also: ranks, mode, devices, split, all_reduce
  ModelBenchModelInfo model;
  std::string backend_description;
  double copy_bandwidth_gbs = 0.0;     // bytes read + written per second, 1e9
  std::vector<PrefillRow> prefill;
  std::vector<DecodeRow> decode;
};

// Checks the options (backend name, positive sizes, model directory present): INVALID_ARGUMENT
// naming the flag.
absl::Status validate_model_bench_options(const ModelBenchOptions& options);

// Runs every measurement; writes the JSON and markdown files when their paths are set.
absl::StatusOr<ModelBenchResult> run_model_bench(const ModelBenchOptions& options);

// Registers the `model` subcommand on `app`; `options` must outlive the parse.
void add_model_bench_command(CLI::App& app, ModelBenchOptions& options);

}  // namespace exl3
