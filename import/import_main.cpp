// exl3-import: converts a llama.cpp GGUF model into a Hugging Face-style model directory that the
// runtime loads (see hf_writer.h).
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "import/hf_writer.h"

int main(int argc, char** argv) {
  std::string gguf_path, out_dir, dtype = "bf16";
  bool force = false, quiet = false;
  double max_shard_gb = 4.0;
  CLI::App app{
      "exl3-import: converts a GGUF model (llama architecture; tensors F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
      "Q2_K..Q6_K) into a Hugging Face-style directory the runtime loads: config.json, generation_config.json, "
      "tokenizer.json, tokenizer_config.json (with the chat template) and safetensors. Quantized tensors are "
      "dequantized to fp32 exactly as the gguf Python package does, llama.cpp's Q/K row order is undone, then "
      "each tensor is cast once to --dtype."};
  app.add_option("gguf", gguf_path, "Input GGUF file (v2 or v3)")->required();
  app.add_option("out_dir", out_dir, "Output model directory (created; must be empty unless --force)")->required();
  app.add_option("--dtype", dtype, "Stored dtype of every tensor: bf16, fp16 (values beyond fp16's range are refused) "
                                   "or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}))
      ->capture_default_str();
  app.add_flag("--force", force, "Write into a non-empty OUT_DIR, replacing its JSON files and removing its old "
                                 "*.safetensors and index");
  app.add_option("--max-shard-gb", max_shard_gb,
                 "Largest safetensors file in GB (10^9 bytes); more tensors go to "
                 "further shards listed in model.safetensors.index.json")
      ->check(CLI::Range(1e-3, 1e6))
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "No progress lines on stderr (errors are still printed)");
  CLI11_PARSE(app, argc, argv);

  exl3::ImportOptions options;
  options.dtype = dtype == "bf16" ? exl3::DType::kBF16 : dtype == "fp16" ? exl3::DType::kF16 : exl3::DType::kF32;
  options.force = force;
  options.max_shard_bytes = static_cast<uint64_t>(max_shard_gb * 1e9);
  if (!quiet) options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  std::fprintf(stderr, "exl3-import %s -> %s (dtype %s, max shard %.2f GB%s)\n", gguf_path.c_str(), out_dir.c_str(),
               dtype.c_str(), max_shard_gb, force ? ", force" : "");
  const auto summary = exl3::import_gguf(gguf_path, out_dir, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "exl3-import: %s\n", std::string(summary.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "exl3-import: wrote %lld tensors, %.1f MB in %d file(s) to %s\n",
               static_cast<long long>(summary->tensors), summary->bytes / 1e6, summary->shards, out_dir.c_str());
  return 0;
}
