// exl3-bench subcommands and their flags (see exl3_bench_cli.h).
#include "bench/exl3_bench_cli.h"

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "bench/allreduce_bench.h"
#include "bench/gemv_bench.h"
#include "bench/kernel_bench.h"
#include "bench/make_model.h"
#include "bench/model_bench.h"
#include "bench/serve_bench.h"
#include "bench/soak_bench.h"

namespace exl3 {
namespace {

void add_make_model(CLI::App& app, MakeModelOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "make-model",
      "Write an EXL3 model directory with random but valid tensors for a named shape (config.json, "
      "quantization_config.json, tokenizer, model*.safetensors shards + index). Loads like a converted model; "
      "the outputs are meaningless but finite, for benchmarks.");
  cmd->add_option("--shape", o.plan.shape,
                  "Model shape: " + absl::StrJoin(model_shape_names(), ", ") +
                      " (the Hugging Face configs of Llama-3.1-8B/70B and Qwen2.5-32B; tiny = 256 hidden, 2 "
                      "layers, for tests)")
      ->required();
  cmd->add_option("--out", o.out_dir, "Output directory (created; must not hold a model unless --overwrite)")->required();
  cmd->add_option("--bpw", o.plan.bpw,
                  "Decoder bits per weight, 1..8; a fraction mixes K = floor and ceil per linear to hit it (the "
                  "achieved mean is reported and stored as quantization_config.bits)")
      ->capture_default_str();
  cmd->add_option("--head-bits", o.plan.head_bits, "lm_head K, 1..8, or 16 for an unquantized fp16 lm_head.weight")
      ->capture_default_str();
  cmd->add_option("--codebook", o.plan.codebook,
                  "Trellis codebook: mul1, mcg, 3inst, or mixed (rotates over the three per linear)")
      ->capture_default_str();
  cmd->add_option("--layers", o.plan.layers, "Number of decoder layers (default: the shape's; fewer for quick runs)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--seed", o.plan.seed, "Seed of every random tensor (same seed and flags, same bytes)")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "Writer threads (default: every core)")->check(CLI::Range(1, 4096));
  cmd->add_option("--shard-mib", o.shard_mib,
                  "Shard size limit in MiB: modules (embedding, a whole layer, norm, head) are never split; a new "
                  "model-0000i-of-0000N.safetensors starts when the next module would pass it")
      ->capture_default_str();
  cmd->add_option("--tokenizer", o.tokenizer_path,
                  "tokenizer.json to copy into the model, with the tokenizer_config.json and special_tokens_map.json "
                  "beside it if present (default: write a byte-level tokenizer: 256 byte tokens, no merges, BOS/EOS "
                  "special tokens at the shape's ids)");
  cmd->add_flag("--overwrite", o.overwrite, "Replace the model files of an existing model directory");
  cmd->callback([&o]() {
    o.log = stderr;
    absl::StatusOr<MakeModelReport> report = make_model(o);
    if (!report.ok()) {
      std::fprintf(stderr, "exl3-bench make-model: error: %s\n", std::string(report.status().message()).c_str());
      throw CLI::RuntimeError(1);
    }
    std::fputs(format_make_model_report(o, *report).c_str(), stderr);
  });
}

}  // namespace

int run_exl3_bench(int argc, const char* const* argv) {
  CLI::App app("exl3-bench: benchmarking tools for EXL3 models", "exl3-bench");
  app.require_subcommand(1);
  MakeModelOptions make_model_options;
  add_make_model(app, make_model_options);
  KernelBenchOptions kernel_bench_options;
  kernel_bench_options.argv.assign(argv, argv + argc);
  add_kernels_subcommand(app, kernel_bench_options);
  ServeBenchOptions serve_bench_options;
  serve_bench_options.argv.assign(argv, argv + argc);
  add_serve_subcommand(app, serve_bench_options);
  SoakOptions soak_options;
  soak_options.argv.assign(argv, argv + argc);
  add_soak_subcommand(app, soak_options);
  ModelBenchOptions model_bench_options;
  model_bench_options.argv.assign(argv, argv + argc);
  add_model_bench_command(app, model_bench_options);
  AllreduceBenchOptions allreduce_bench_options;
  allreduce_bench_options.argv.assign(argv, argv + argc);
  add_allreduce_subcommand(app, allreduce_bench_options);
  GemvBenchOptions gemv_bench_options;
  gemv_bench_options.argv.assign(argv, argv + argc);
  add_gemv_subcommand(app, gemv_bench_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}

}  // namespace exl3
