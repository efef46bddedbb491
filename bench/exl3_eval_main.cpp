// exl3-eval: perplexity over non-overlapping windows (optionally through a quantized KV cache, and
// its KL divergence from the full-precision cache), fp32 logits dumps, and tokenizer checks, all
// on the CPU backend. Flags are parsed here and passed down as values.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/perplexity.h"
#include "bench/token_ids_file.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "worker/loader/safetensors.h"
#include "worker/model/config.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

struct EvalOptions {
  std::string model_dir;
  std::string ids_path;
  std::string text_path;
  std::string dump_logits_path;
  std::string tokenizer_path;
  std::string encode_jsonl_path;
  int64_t window = 0;
  bool parse_special = true;
  std::string cache_bits = "16,16";
  bool kl_vs_fp16 = false;
  int64_t chunk = 0;
  int64_t max_windows = 0;
  // Off by default: exl3-eval measures the model (whole windows and sequences in one forward, where
  // a server would not quantize them either); --int8-activations auto|on measures the decode path's
  // rounding, e.g. with --chunk 32 or less.
  std::string int8_activations = "off";
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

absl::StatusOr<std::unique_ptr<LlamaModel>> load_model(const std::string& dir, const std::string& int8_activations) {
  const auto t0 = Clock::now();
  EXL3_ASSIGN_OR_RETURN(const Int8Activations int8, parse_int8_activations(int8_activations, "--int8-activations"));
  EXL3_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(dir));
  CpuBackendOptions backend;
  backend.int8_activations = int8;
  std::fprintf(stderr, "loading %s (int8 activations %s)\n", dir.c_str(), int8_activations_name(int8).c_str());
  const LoadProgress progress = [](int64_t done, int64_t total) {
    std::fprintf(stderr, "\r  loaded %lld/%lld components", static_cast<long long>(done), static_cast<long long>(total));
    if (done == total) std::fprintf(stderr, "\n");
  };
  auto model = LlamaModel::load_shard(dir, ModelShard::full(config),
                                      std::shared_ptr<Backend>(make_cpu_backend(backend)), progress);
  if (model.ok()) {
    const ModelConfig& c = (*model)->config();
    std::fprintf(stderr, "  %s: %lld layers, hidden %lld, vocab %lld, %.2f bpw decoder, %.1f MB stored, %.1f s\n",
                 c.architecture_name.c_str(), static_cast<long long>(c.num_layers),
                 static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size),
                 (*model)->decoder_bits_per_weight(), (*model)->stored_bytes() / 1e6, seconds_since(t0));
  }
  return model;
}

absl::Status run_encode_jsonl(const EvalOptions& o) {
  EXL3_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_file(o.tokenizer_path));
  std::ifstream in(o.encode_jsonl_path);
  if (!in) return absl::NotFoundError(absl::StrCat(o.encode_jsonl_path, ": cannot open"));
  return encode_jsonl(tok, in, std::cout, o.parse_special);
}

absl::StatusOr<TokenSequences> read_input(const EvalOptions& o) {
  if (!o.ids_path.empty()) return load_token_sequences(o.ids_path);
  EXL3_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_model_dir(o.model_dir));
  std::ifstream in(o.text_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(o.text_path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  const auto t0 = Clock::now();
  TokenSequences seqs{tok.encode(ss.str(), o.parse_special)};
  std::fprintf(stderr, "tokenized %s: %zu tokens in %.2f s (no BOS added)\n", o.text_path.c_str(), seqs[0].size(),
               seconds_since(t0));
  return seqs;
}

absl::Status run_perplexity(const EvalOptions& o) {
  EXL3_ASSIGN_OR_RETURN(const KvCacheBits bits, parse_kv_cache_bits(o.cache_bits, "--cache-bits"));
  PerplexityOptions po;
  po.window = o.window;
  po.cache_bits = bits;
  po.kl_vs_full = o.kl_vs_fp16;
  po.chunk = o.chunk;
  po.max_windows = o.max_windows;
  EXL3_ASSIGN_OR_RETURN(TokenSequences seqs, read_input(o));
  std::vector<int32_t> ids;
  for (const auto& s : seqs) ids.insert(ids.end(), s.begin(), s.end());
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, load_model(o.model_dir, o.int8_activations));
  const auto t0 = Clock::now();
  auto last_print = t0;
  EXL3_ASSIGN_OR_RETURN(PerplexityResult r,
                        evaluate_perplexity(*model, ids, po, [&](int64_t done, int64_t total, double ppl) {
                          if (done == total || seconds_since(last_print) > 2.0) {
                            last_print = Clock::now();
                            std::fprintf(stderr, "  window %lld/%lld, running perplexity %.3f, %.0f tokens/s\n",
                                         static_cast<long long>(done), static_cast<long long>(total), ppl,
                                         done * o.window / seconds_since(t0));
                          }
                        }));
  std::printf("cache bits: %s\nwindows: %lld\nscored tokens: %lld\nmean nll: %.6f\nperplexity: %.4f\n",
              kv_cache_bits_name(bits).c_str(), static_cast<long long>(r.windows),
              static_cast<long long>(r.scored_tokens), r.mean_nll, r.perplexity);
  if (o.kl_vs_fp16) {
    std::printf("full-precision cache perplexity: %.4f\nperplexity change: %+.4f%%\nmean KL vs full cache: %.6g\n"
                "max KL vs full cache: %.6g\ntop-1 agreement: %.6f\n",
                r.full_perplexity, 100.0 * (r.perplexity / r.full_perplexity - 1.0), r.mean_kl, r.max_kl,
                r.top1_agreement);
  }
  return absl::OkStatus();
}

absl::Status run_dump_logits(const EvalOptions& o) {
  EXL3_ASSIGN_OR_RETURN(TokenSequences seqs, read_input(o));
  if (seqs.empty() || seqs[0].empty()) return absl::InvalidArgumentError("no token ids to run");
  for (size_t i = 1; i < seqs.size(); ++i) {
    if (seqs[i].size() != seqs[0].size()) {
      return absl::InvalidArgumentError(absl::StrCat("--dump-logits needs sequences of equal length: sequence 0 has ",
                                                     seqs[0].size(), " tokens, sequence ", i, " has ", seqs[i].size()));
    }
  }
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, load_model(o.model_dir, o.int8_activations));
  const int64_t vocab = model->config().vocab_size, len = static_cast<int64_t>(seqs[0].size());
  if (len > model->config().max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("sequences of ", len, " tokens exceed the model's context of ",
                                                   model->config().max_position_embeddings));
  }
  const int64_t n_seq = static_cast<int64_t>(seqs.size());
  Tensor logits = Tensor::zeros(DType::kF32, {n_seq, len, vocab});
  Tensor ids = Tensor::zeros(DType::kI64, {n_seq, len});
  for (int64_t s = 0; s < n_seq; ++s) {
    for (int64_t t = 0; t < len; ++t) {
      const int32_t id = seqs[s][t];
      if (id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", id, " (sequence ", s, ", position ", t,
                                                       ") outside the vocabulary [0, ", vocab, ")"));
      }
      ids.mutable_data<int64_t>()[s * len + t] = id;
    }
    const Tensor out = forward_sequence(*model, seqs[s], {});
    std::copy_n(out.data<float>(), len * vocab, logits.mutable_data<float>() + s * len * vocab);
    std::fprintf(stderr, "  sequence %lld/%lld\n", static_cast<long long>(s + 1), static_cast<long long>(n_seq));
  }
  EXL3_RETURN_IF_ERROR(write_safetensors(o.dump_logits_path, {{"logits", logits}, {"input_ids", ids}}));
  std::printf("wrote logits %s to %s\n", shape_string(logits.shape()).c_str(), o.dump_logits_path.c_str());
  return absl::OkStatus();
}

absl::Status run(const EvalOptions& o) {
  if (!o.encode_jsonl_path.empty()) {
    if (o.tokenizer_path.empty()) return absl::InvalidArgumentError("--encode-jsonl needs --tokenizer PATH");
    return run_encode_jsonl(o);
  }
  if (o.model_dir.empty()) return absl::InvalidArgumentError("--model DIR is required (or --tokenizer with --encode-jsonl)");
  EXL3_RETURN_IF_ERROR(parse_int8_activations(o.int8_activations, "--int8-activations").status());
  if (o.ids_path.empty() == o.text_path.empty()) return absl::InvalidArgumentError("give exactly one of --ids or --text");
  if (!o.dump_logits_path.empty()) {
    if (o.cache_bits != "16,16" || o.kl_vs_fp16) {
      return absl::InvalidArgumentError("--cache-bits and --kl-vs-fp16 apply to perplexity, not to --dump-logits");
    }
    return run_dump_logits(o);
  }
  if (o.window <= 0) return absl::InvalidArgumentError("perplexity needs --window N (e.g. 256)");
  return run_perplexity(o);
}

}  // namespace
}  // namespace exl3

int main(int argc, char** argv) {
  exl3::EvalOptions o;
  CLI::App app{"exl3-eval: perplexity, logits dumps and tokenizer checks for EXL3 and HF Llama-family models (CPU)"};
  app.add_option("--model", o.model_dir, "Model directory (config.json, *.safetensors, tokenizer.json)");
  app.add_option("--ids", o.ids_path,
                 "Token ids: a JSON list of id lists, or a safetensors file with one integer tensor (1-D = one sequence)");
  app.add_option("--text", o.text_path, "UTF-8 text file, tokenized with the model's tokenizer (no BOS added)");
  app.add_option("--window", o.window, "Perplexity window length in tokens (non-overlapping windows)");
  app.add_option("--dump-logits", o.dump_logits_path,
                 "Write fp32 logits [n_seq, len, vocab] (and input_ids) to this safetensors file instead of perplexity");
  app.add_option("--tokenizer", o.tokenizer_path, "tokenizer.json to use with --encode-jsonl");
  app.add_option("--encode-jsonl", o.encode_jsonl_path,
                 "For each line {\"text\": ...} of this file print {\"ids\": [...]} (no BOS added)");
  app.add_option("--cache-bits", o.cache_bits,
                 "KV cache widths K,V for perplexity (a single N means N,N): each 2..8 = quantized to that many bits "
                 "per element (per 32-element group: Hadamard rotation + fp16 scale, exl3-format.md section 9), or 16 "
                 "= full precision (F32 pages on this CPU backend)")
      ->capture_default_str();
  app.add_flag("--kl-vs-fp16", o.kl_vs_fp16,
               "Also run every window through a full-precision cache and report its perplexity and the mean KL "
               "divergence KL(full || --cache-bits) of the logits over the scored positions");
  app.add_option("--chunk", o.chunk,
                 "Tokens per forward inside a perplexity window (0 = the whole window in one forward; either way "
                 "attention reads every key and value from the cache, quantized or not)")
      ->capture_default_str();
  app.add_option("--max-windows", o.max_windows, "Evaluate only the first N windows (0 = all)")->capture_default_str();
  app.add_option("--int8-activations", o.int8_activations,
                 exl3::int8_activations_flag_help() +
                     ". Default off here: exl3-eval runs whole windows and sequences (prefill-shaped work, which "
                     "keeps full-precision activations when served); auto or on with --chunk 32 or less measures the "
                     "decode path")
      ->capture_default_str();
  app.add_flag("!--no-parse-special", o.parse_special,
               "Treat special-token text such as <s> as plain text instead of matching it");
  CLI11_PARSE(app, argc, argv);
  const absl::Status status = exl3::run(o);
  if (!status.ok()) {
    std::fprintf(stderr, "exl3-eval: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
