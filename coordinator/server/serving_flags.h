// The flags that shape serving, shared by exl3-launch and exl3-coordinator: sequence length, batch
// and KV cache sizes and widths, int8 activations, the GPU workers' all-reduce, decode steps per
// command, the step pipeline, speculative decoding and prefix reuse. add_serving_flags() declares
// them; after parsing, apply_serving_flags() turns the text-valued ones into the coordinator's
// options and checks the ranges it owns (INVALID_ARGUMENT naming the flag otherwise). Header-only:
// only the two mains use CLI11.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "coordinator/server/coordinator.h"
#include "kernels/int8_activations.h"
#include "worker/comm/all_reduce_mode.h"
#include "worker/kv_cache_bits.h"

namespace exl3 {

struct ServingFlagText {
  std::string cache_bits = "16,16";
  std::string int8_activations = "off";
  std::string all_reduce = "nccl";
};

inline void add_serving_flags(CLI::App& app, CoordinatorOptions& o, ServingFlagText& text) {
  const char* group = "Serving";
  app.add_option("--max-seq-len", o.max_seq_len, "Longest sequence served, prompt + output (default: the model's)")
      ->group(group);
  app.add_option("--max-batch", o.max_batch, "Most sequences running at once (continuous batching)")
      ->capture_default_str()->group(group);
  app.add_option("--cache-tokens", o.cache_tokens,
                 "KV cache size in tokens, the same on every worker (rounded up to whole pages; at least "
                 "--max-seq-len); refused when the caps cannot hold it. Default: --max-batch full-length sequences, or, "
                 "when the caps cannot hold that many, the most pages that fit (at least one full-length sequence; "
                 "requests then wait for pages)")
      ->check(CLI::NonNegativeNumber)->group(group);
  app.add_option("--cache-bits", text.cache_bits,
                 "KV cache widths K,V (a single N means N,N): each 2..8 = quantized to that many bits per element "
                 "(per 32-element group: Hadamard rotation + fp16 scale, exl3-format.md section 9), or 16 = full "
                 "precision (F16 on GPUs, F32 on CPU workers); sent to every worker. The planner prices pages at these "
                 "widths, so the same --split holds more cache tokens (4,4 stores 4.5 bits per element vs 16). A "
                 "--draft-model's cache takes them too where its KV heads allow (else it stays full precision)")
      ->capture_default_str()->group(group);
  app.add_option("--int8-activations", text.int8_activations,
                 int8_activations_flag_help() + " (the coordinator sends it to every worker)")
      ->capture_default_str()->group(group);
  app.add_option("--all-reduce", text.all_reduce, all_reduce_flag_help())->capture_default_str()->group(group);
  app.add_option("--all-reduce-oneshot-max-kib", o.all_reduce_oneshot_max_kib, all_reduce_oneshot_max_kib_flag_help())
      ->capture_default_str()->group(group);
  app.add_option("--decode-steps", o.decode_steps, "Decode iterations per worker command (fewer round trips)")
      ->capture_default_str()->group(group);
  app.add_flag("--step-pipeline,!--no-step-pipeline", o.step_pipeline,
               "Send each step to the workers while the previous one still runs (decoding sequences continue from "
               "the tokens sampled on the workers; what a sequence that stopped meanwhile computed is discarded), so "
               "the workers never wait for a coordinator round trip between steps. Outputs are the same either way; "
               "--no-step-pipeline: one step at a time. Not used with --draft-model. Default: on")
      ->group(group);
  app.add_option("--draft-model", o.draft_model_dir,
                 "Speculative decoding: directory of a smaller model with the same tokenizer (e.g. the same model "
                 "at fewer bits per weight); the lowest rank with the head loads it whole and proposes "
                 "--draft-tokens tokens per decode step, which the model verifies in one forward (rejection "
                 "sampling: outputs are distributed exactly as without a draft; greedy output is the same)")
      ->group(group);
  app.add_option("--draft-tokens", o.draft_tokens, "Tokens the draft model proposes per decode step (1..16)")
      ->check(CLI::Range(1, 16))->capture_default_str()->group(group);
  app.add_flag("--prefix-cache,!--no-prefix-cache", o.prefix_cache,
               "Reuse the KV cache pages of prompt prefixes computed before (kept after requests end, evicted least "
               "recently used when pages run short); --no-prefix-cache or --prefix-cache=false turns it off. "
               "Default: on")
      ->group(group);
}

inline absl::Status apply_serving_flags(const ServingFlagText& text, CoordinatorOptions& o) {
  absl::StatusOr<KvCacheBits> bits = parse_kv_cache_bits(text.cache_bits, "--cache-bits");
  if (!bits.ok()) return bits.status();
  o.cache_bits = *bits;
  absl::StatusOr<Int8Activations> int8 = parse_int8_activations(text.int8_activations, "--int8-activations");
  if (!int8.ok()) return int8.status();
  o.int8_activations = *int8;
  absl::StatusOr<AllReduceMode> all_reduce = parse_all_reduce_mode(text.all_reduce, "--all-reduce");
  if (!all_reduce.ok()) return all_reduce.status();
  o.all_reduce = *all_reduce;
  return validate_all_reduce_oneshot_max_kib(o.all_reduce_oneshot_max_kib, "--all-reduce-oneshot-max-kib");
}

}  // namespace exl3
