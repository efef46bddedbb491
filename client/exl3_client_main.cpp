// exl3-client: command-line client of the EXL3 server's public gRPC API (exl3.v1.Inference) and
// its standard health service. Subcommands: generate, tokenize, detokenize, info, stats, health.
// Exit codes: 0 success, 1 RPC error (or health not SERVING), 2 usage error.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/commands.h"
#include "client/request_builder.h"
#include "client/rpc_util.h"

namespace {

using exl3::client::kExitUsage;

int usage_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", message.c_str());
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"exl3-client: talks to an EXL3 server (exl3-launch or exl3-coordinator) over its public gRPC API."};
  app.require_subcommand(1);
  exl3::client::ClientConfig config;
  app.add_option("--server", config.server, "Server address HOST:PORT")->capture_default_str();
  app.add_option("--timeout", config.timeout_s, "Deadline of the call in seconds (generation included)")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e7));
  std::string auth_token_file, tls_ca_file;
  app.add_option("--auth-token-file", auth_token_file,
                 "File holding the server's bearer token (sent as \"authorization: Bearer <token>\")");
  app.add_flag("--tls", config.tls, "Connect over TLS, verifying the server with the system's root certificates");
  app.add_option("--tls-ca", tls_ca_file, "Connect over TLS, verifying the server with this PEM CA certificate");

  // generate
  exl3::client::GenerateOptions gen;
  std::string prompt;
  bool gen_json = false;
  CLI::App* generate = app.add_subcommand(
      "generate", "Stream a completion: text to stdout as it arrives, then a summary line to stderr");
  CLI::Option* prompt_opt = generate->add_option("prompt", prompt, "Prompt text (or give --tokens)");
  CLI::Option* tokens_opt =
      generate->add_option("--tokens", gen.tokens, "Prompt as token ids instead of text, e.g. \"1,2,3\"");
  prompt_opt->excludes(tokens_opt);
  generate->add_option("--max-new-tokens", gen.max_new_tokens,
                       "Most tokens to generate (default: up to the context limit)");
  generate->add_option("--temperature", gen.temperature, "Sampling temperature; 0 = greedy (server default 1.0)");
  generate->add_option("--top-k", gen.top_k, "Keep the K most likely tokens; 0 = off");
  generate->add_option("--top-p", gen.top_p, "Keep the smallest set with probability >= P; 1 = off");
  generate->add_option("--min-p", gen.min_p, "Drop tokens less likely than P times the most likely; 0 = off");
  generate->add_option("--repetition-penalty", gen.repetition_penalty,
                       "Repetition penalty over prompt and output tokens; 1 = off");
  generate->add_option("--presence-penalty", gen.presence_penalty, "Presence penalty over output tokens; 0 = off");
  generate->add_option("--frequency-penalty", gen.frequency_penalty, "Frequency penalty over output tokens; 0 = off");
  generate->add_option("--seed", gen.seed, "Seed of the sampler's RNG; same seed and prompt give the same tokens");
  generate->add_option("--logit-bias", gen.logit_bias, "Add BIAS to token ID's logit, as ID=BIAS; repeatable")
      ->allow_extra_args(false);
  generate->add_option("--ban", gen.banned_token_ids, "Never sample token ID; repeatable")->allow_extra_args(false);
  generate->add_option("--dry-multiplier", gen.dry_multiplier, "DRY repetition penalty strength; 0 = off");
  generate->add_option("--dry-base", gen.dry_base, "DRY penalty growth per repeated token (server default 1.75)");
  generate->add_option("--dry-allowed-length", gen.dry_allowed_length,
                       "Longest repeat DRY leaves unpenalised (server default 2)");
  generate->add_option("--dry-range", gen.dry_range, "Last tokens DRY looks at; 0 = all");
  generate->add_option("--dry-breaker", gen.dry_breakers,
                       "A string that breaks DRY's repeats; repeatable (default: newline, colon, quote, asterisk)")
      ->allow_extra_args(false);
  generate->add_flag("--no-dry-breakers", gen.no_dry_breakers, "DRY with no sequence breakers");
  generate->add_option("--typical-p", gen.typical_p, "Locally typical sampling mass; 1 = off");
  generate->add_option("--xtc-threshold", gen.xtc_threshold, "XTC: probability a top choice must reach (default 0.1)");
  generate->add_option("--xtc-probability", gen.xtc_probability, "XTC: chance of cutting the top choices; 0 = off");
  generate->add_flag("--temperature-last", gen.temperature_last, "Apply temperature after the truncation filters");
  generate->add_option("--logprobs", gen.logprobs, "Return each token's logprob and the N most likely (0-20)");
  generate->add_option("--ban-string", gen.banned_strings,
                       "Never output STR (ASCII case-insensitive): back off and sample again; repeatable")
      ->allow_extra_args(false);
  generate->add_option("--stop", gen.stop_strings, "Stop when the text contains STR (not returned); repeatable")
      ->allow_extra_args(false);
  generate->add_option("--stop-token", gen.stop_token_ids, "Stop after sampling token ID (returned); repeatable")
      ->allow_extra_args(false);
  generate->add_flag("--ignore-eos", gen.ignore_eos, "Keep generating past the model's end-of-sequence tokens");
  generate->add_flag("--no-bos", gen.no_bos, "Do not prepend the BOS token (default: the tokenizer's setting)");
  generate->add_flag("--special-as-text", gen.special_tokens_as_text,
                     "Treat special-token text such as <|eot_id|> in the prompt as plain text");
  generate->add_flag("--skip-special", gen.skip_special_tokens, "Leave special tokens out of the returned text");
  generate->add_option("--request-id", gen.request_id, "Id echoed in the responses (default: assigned by the server)");
  generate->add_flag("--json", gen_json, "Print each streamed response as one line of JSON instead of the text");

  // tokenize
  exl3::v1::TokenizeRequest tokenize_request;
  std::string tokenize_text;
  bool tokenize_no_bos = false, tokenize_special_as_text = false, tokenize_json = false;
  CLI::App* tokenize = app.add_subcommand("tokenize", "Print the token ids of TEXT as \"1,2,3\"");
  tokenize->add_option("text", tokenize_text, "Text to tokenize")->required();
  tokenize->add_flag("--no-bos", tokenize_no_bos, "Do not prepend the BOS token (default: the tokenizer's setting)");
  tokenize->add_flag("--special-as-text", tokenize_special_as_text, "Treat special-token text as plain text");
  tokenize->add_flag("--json", tokenize_json, "Print the response as JSON");

  // detokenize
  std::string detokenize_ids;
  bool detokenize_skip_special = false, detokenize_json = false;
  CLI::App* detokenize = app.add_subcommand("detokenize", "Print the text of token IDS (no newline added)");
  detokenize->add_option("ids", detokenize_ids, "Token ids, e.g. \"1,2,3\" or \"1 2 3\"")->required();
  detokenize->add_flag("--skip-special", detokenize_skip_special, "Leave special tokens out of the text");
  detokenize->add_flag("--json", detokenize_json, "Print the response as JSON");

  bool info_json = false, stats_json = false;
  CLI::App* info = app.add_subcommand("info", "Print the model's facts and the shard plan (one row per rank)");
  info->add_flag("--json", info_json, "Print the response as JSON");
  CLI::App* stats = app.add_subcommand("stats", "Print scheduler, throughput and per-worker memory counters");
  stats->add_flag("--json", stats_json, "Print the response as JSON");

  std::string health_service;
  CLI::App* health =
      app.add_subcommand("health", "grpc.health.v1 Check: print the serving status; exit 0 only when SERVING");
  health->add_option("--service", health_service, "Service to check (default: the whole server)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error
    return code == 0 ? 0 : kExitUsage;
  }

  if (absl::Status s = exl3::client::load_client_security(auth_token_file, tls_ca_file, config); !s.ok()) {
    return usage_error(std::string(s.message()));
  }
  if (generate->parsed()) {
    if (prompt_opt->count() > 0) gen.prompt = prompt;
    absl::StatusOr<exl3::v1::GenerateRequest> request = exl3::client::build_generate_request(gen);
    if (!request.ok()) return usage_error(std::string(request.status().message()));
    return exl3::client::run_generate(config, *request, gen_json);
  }
  if (tokenize->parsed()) {
    tokenize_request.set_text(tokenize_text);
    if (tokenize_no_bos) tokenize_request.set_add_bos(false);
    tokenize_request.set_special_tokens_as_text(tokenize_special_as_text);
    return exl3::client::run_tokenize(config, tokenize_request, tokenize_json);
  }
  if (detokenize->parsed()) {
    absl::StatusOr<std::vector<int32_t>> ids = exl3::client::parse_token_ids(detokenize_ids);
    if (!ids.ok()) return usage_error(std::string(ids.status().message()));
    exl3::v1::DetokenizeRequest request;
    request.mutable_ids()->Add(ids->begin(), ids->end());
    request.set_skip_special_tokens(detokenize_skip_special);
    return exl3::client::run_detokenize(config, request, detokenize_json);
  }
  if (info->parsed()) return exl3::client::run_info(config, info_json);
  if (stats->parsed()) return exl3::client::run_stats(config, stats_json);
  if (health->parsed()) return exl3::client::run_health(config, health_service);
  return usage_error("no subcommand");
}
