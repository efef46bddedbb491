// exl3-bench model on the CPU backend with the embedded 4.0 bpw model and tiny settings: the JSON
// report parses with every field present, throughputs are positive and finite, roofline figures
// are sane, the markdown has one row per measurement; several CPU ranks (tensor parallel, layer
// split) run and report; a quantized KV cache's bytes are counted at its widths; bad flags fail
// with clear messages.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "bench/bench_cli.h"
#include "bench/exl3_bench_cli.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using testing::run_cli;

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::source_path;
using testing::work_path;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}


std::string model_dir() { return source_path("models/exl3-4.0bpw"); }

bool positive_finite(const json& v) { return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0.0; }

// Table rows of a markdown section: lines starting with "| <digit>" after `heading`, up to the
// next heading.
int table_rows(const std::string& md, const std::string& heading) {
  const size_t at = md.find(heading);
  if (at == std::string::npos) return -1;
  int rows = 0;
  std::istringstream in(md.substr(at + heading.size()));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) break;
    if (line.size() > 2 && line[0] == '|' && line[2] >= '0' && line[2] <= '9') ++rows;
  }
  return rows;
}

TEST(ModelBench, CpuTinyRunWritesJsonAndMarkdown) {
  fs::create_directories(work_path("model_bench"));
  const std::string json_path = work_path("model_bench/tiny.json");
  const std::string md_path = work_path("model_bench/tiny.md");
  fs::remove(json_path);
  fs::remove(md_path);
  auto [rc, err] = run_cli({"model", "--model", model_dir(), "--backend", "cpu", "--prefill", "16", "--batch", "1,2",
                            "--decode-steps", "4", "--warmup", "1", "--prefill-repeats", "1", "--decode-prompt", "8",
                            "--page-size", "16", "--json", json_path, "--markdown", md_path});
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("decode batch   2"), std::string::npos) << err;

  std::ifstream in(json_path);
  ASSERT_TRUE(in) << "no JSON written; stderr:\n" << err;
  const json j = json::parse(in);

  const json& env = j.at("environment");
  EXPECT_EQ(env.at("backend"), "cpu");
  EXPECT_TRUE(env.at("device").at("cpu_model").is_string());
  // The commit the binary was built from (cmake/write_git_commit.cmake), "-dirty" with local edits.
  EXPECT_TRUE(std::regex_match(env.at("commit").get<std::string>(), std::regex("[0-9a-f]{7,40}(-dirty)?|unknown")))
      << env.at("commit");
  EXPECT_TRUE(env.at("date").get<std::string>().ends_with("Z"));
  ASSERT_TRUE(env.at("argv").is_array());
  EXPECT_EQ(env.at("argv").at(0), "exl3-bench");
  EXPECT_EQ(env.at("argv").at(1), "model");

  const json& m = j.at("model");
  EXPECT_EQ(m.at("name"), "exl3-4.0bpw");
  EXPECT_EQ(m.at("shape").at("hidden_size"), 512);
  EXPECT_EQ(m.at("shape").at("num_layers"), 4);
  EXPECT_EQ(m.at("shape").at("num_kv_heads"), 4);
  EXPECT_NEAR(m.at("bpw").get<double>(), 4.0, 1e-9);
  EXPECT_GT(m.at("stored_bytes").get<uint64_t>(), 0u);
  EXPECT_GT(m.at("weight_bytes").get<uint64_t>(), 0u);
  // Decoder: 4 layers of q,k,v,o (512x512, 512x256 twice, 512x512) and gate, up, down
  // (512x1536 x2, 1536x512); head 512x4096 (EXL3, 6 bits).
  const uint64_t decoder = 4ull * (512 * 512 * 2 + 512 * 256 * 2 + 512 * 1536 * 3);
  EXPECT_EQ(m.at("exl3_weights").get<uint64_t>(), decoder + 512ull * 4096);

  EXPECT_TRUE(positive_finite(j.at("copy_bandwidth_gbs"))) << j.at("copy_bandwidth_gbs");

  ASSERT_EQ(j.at("prefill").size(), 1u);
  EXPECT_EQ(j.at("prefill")[0].at("tokens"), 16);
  EXPECT_TRUE(positive_finite(j.at("prefill")[0].at("tokens_per_s"))) << j.at("prefill")[0];
  EXPECT_TRUE(positive_finite(j.at("prefill")[0].at("seconds")));

  ASSERT_EQ(j.at("decode").size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const json& d = j.at("decode")[i];
    SCOPED_TRACE(d.dump());
    EXPECT_EQ(d.at("batch"), static_cast<int>(i) + 1);
    EXPECT_EQ(d.at("steps"), 4);
    EXPECT_TRUE(positive_finite(d.at("tokens_per_s")));
    EXPECT_TRUE(positive_finite(d.at("step_ms")));
    EXPECT_TRUE(positive_finite(d.at("gbs")));
    const double fraction = d.at("copy_fraction").get<double>();
    EXPECT_GT(fraction, 0.0);
    EXPECT_LT(fraction, 1e3);
    EXPECT_EQ(d.at("weight_bytes"), m.at("weight_bytes"));
    // Prompt 8, 1 warmup step: the measured steps put new tokens at positions 9..12, attending
    // 10..13 positions (mean 11.5); F32 KV on the CPU: 4 layers · 2 · 4 heads · 64 · 4 bytes.
    EXPECT_NEAR(d.at("mean_context").get<double>(), 11.5, 1e-9);
    EXPECT_EQ(d.at("kv_bytes").get<uint64_t>(), static_cast<uint64_t>((i + 1) * 4 * 2 * 4 * 64 * 4 * 46 / 4));
  }
  EXPECT_TRUE(positive_finite(j.at("decode")[0].at("exl3_weights_per_ms")));
  EXPECT_TRUE(j.at("decode")[1].at("exl3_weights_per_ms").is_null());

  const std::string md = read_text(md_path);
  EXPECT_EQ(table_rows(md, "## Prefill"), 1) << md;
  EXPECT_EQ(table_rows(md, "## Decode"), 2) << md;
}

// Runs the tiny model with `extra` flags and returns the JSON report (empty on failure).
json tiny_run(const std::string& tag, const std::vector<std::string>& extra, std::string* md = nullptr) {
  fs::create_directories(work_path("model_bench"));
  const std::string json_path = work_path("model_bench/" + tag + ".json");
  const std::string md_path = work_path("model_bench/" + tag + ".md");
  fs::remove(json_path);
  std::vector<std::string> args = {"model", "--model", model_dir(), "--backend", "cpu", "--prefill", "16", "--batch",
                                   "1,2", "--decode-steps", "2", "--warmup", "1", "--prefill-repeats", "1",
                                   "--decode-prompt", "8", "--page-size", "16", "--json", json_path,
                                   "--markdown", md_path};
  args.insert(args.end(), extra.begin(), extra.end());
  auto [rc, err] = run_cli(args);
  EXPECT_EQ(rc, 0) << err;
  if (rc != 0) return json();
  if (md != nullptr) *md = read_text(md_path);
  std::ifstream in(json_path);
  return json::parse(in);
}

// Decode prompts prefilled in steps smaller than a batch's prompts (--decode-prompt-chunk 16: three
// prompts of 24 tokens in five steps, two of them cutting a prompt; the engine, made for steps of
// 16 tokens, refuses any larger one): the rows come out with the context and KV reads of those
// prompts, as with the prompts in one step; a chunk of 0 is refused.
TEST(ModelBench, CpuDecodePromptsInChunks) {
  fs::create_directories(work_path("model_bench"));
  // The decode rows of batch 1 and 3 with 24-token prompts in steps of at most `chunk` tokens.
  const auto decode_rows = [](const std::string& chunk) {
    const std::string json_path = work_path("model_bench/chunk" + chunk + ".json");
    fs::remove(json_path);
    auto [rc, err] =
        run_cli({"model", "--model",           model_dir(), "--backend",       "cpu",    "--prefill",
                 "16",    "--batch",           "1,3",       "--decode-steps",  "2",      "--warmup",
                 "1",     "--prefill-repeats", "1",         "--decode-prompt", "24",     "--decode-prompt-chunk",
                 chunk,   "--page-size",       "16",        "--json",          json_path});
    EXPECT_EQ(rc, 0) << err;
    std::ifstream in(json_path);
    return rc == 0 && in ? json::parse(in) : json::object({{"decode", json::array()}});
  };
  const json chunked = decode_rows("16");
  const json whole = decode_rows("2048");
  ASSERT_EQ(chunked.at("decode").size(), 2u);
  ASSERT_EQ(whole.at("decode").size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const json& d = chunked.at("decode")[i];
    SCOPED_TRACE(d.dump());
    EXPECT_EQ(d.at("batch"), i == 0 ? 1 : 3);
    EXPECT_TRUE(positive_finite(d.at("tokens_per_s")));
    // Prompt 24, 1 warmup step: the 2 measured steps attend 26 and 27 positions.
    EXPECT_NEAR(d.at("mean_context").get<double>(), 26.5, 1e-9);
    EXPECT_EQ(d.at("kv_bytes"), whole.at("decode")[i].at("kv_bytes"));
  }
  auto [rc, err] = run_cli({"model", "--model", model_dir(), "--backend", "cpu", "--prefill", "16", "--batch", "1",
                            "--decode-prompt-chunk", "0"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--decode-prompt-chunk must be >= 1"), std::string::npos) << err;
}

// Two CPU ranks over Gloo, tensor parallel (even) and a layer split (uneven caps): the report
// says so, sums the ranks' weights (tp replicates the embedding and norms, a layer split holds
// each tensor once) and has every row.
TEST(ModelBench, CpuRanksRunTensorParallelAndLayerSplit) {
  const json one = tiny_run("ranks1", {});
  std::string md;
  const json tp = tiny_run("tp2", {"--ranks", "2"}, &md);
  const json layers = tiny_run("layers2", {"--ranks", "2", "--mode", "layers", "--split", "1,3"});
  ASSERT_FALSE(one.is_null() || tp.is_null() || layers.is_null());
  EXPECT_EQ(one.at("environment").at("ranks"), 1);
  EXPECT_FALSE(one.at("environment").contains("mode"));
  EXPECT_EQ(tp.at("environment").at("ranks"), 2);
  EXPECT_EQ(tp.at("environment").at("mode"), "tp");
  EXPECT_EQ(layers.at("environment").at("mode"), "layers");
  EXPECT_EQ(layers.at("environment").at("split_gib"), json::array({1.0, 3.0}));
  const uint64_t single = one.at("model").at("weight_bytes").get<uint64_t>();
  const uint64_t tp_bytes = tp.at("model").at("weight_bytes").get<uint64_t>();
  EXPECT_GT(tp_bytes, single);
  EXPECT_LT(tp_bytes, 2 * single);
  EXPECT_EQ(layers.at("model").at("weight_bytes").get<uint64_t>(), single);
  for (const json* j : {&tp, &layers}) {
    ASSERT_EQ(j->at("prefill").size(), 1u);
    EXPECT_TRUE(positive_finite(j->at("prefill")[0].at("tokens_per_s")));
    ASSERT_EQ(j->at("decode").size(), 2u);
    for (const json& d : j->at("decode")) {
      EXPECT_TRUE(positive_finite(d.at("tokens_per_s"))) << d;
      EXPECT_EQ(d.at("weight_bytes"), j->at("model").at("weight_bytes"));
      EXPECT_EQ(d.at("kv_bytes"), one.at("decode")[d.at("batch").get<int>() - 1].at("kv_bytes"));
    }
  }
  EXPECT_NE(md.find("- ranks: 2, tensor parallel"), std::string::npos) << md;
  EXPECT_EQ(table_rows(md, "## Decode"), 2) << md;
}

// --cache-bits 8,4 (a quantized KV cache, as exl3-launch --cache-bits): the report names the widths
// and counts each token's K at 8 bits and V at 4 (per 32 elements, bits words and a 2-byte scale:
// 256 / 32 · (4 · 8 + 2) + 256 / 32 · (4 · 4 + 2) = 416 bytes a token and layer), one rank and two
// (tensor parallel: the planner prices that cache); a width outside 2..8 and 16 is refused, naming
// the flag.
TEST(ModelBench, CpuQuantizedCacheRowsCountItsBytes) {
  std::string md;
  const json one = tiny_run("cache84", {"--cache-bits", "8,4"}, &md);
  EXPECT_NE(md.find("KV cache bits: 8,4"), std::string::npos) << md;
  const json tp = tiny_run("cache84-tp2", {"--cache-bits", "8,4", "--ranks", "2"});
  ASSERT_FALSE(one.is_null() || tp.is_null());
  for (const json* j : {&one, &tp}) {
    EXPECT_EQ(j->at("environment").at("cache_bits"), "8,4");
    ASSERT_EQ(j->at("decode").size(), 2u);
    for (const json& d : j->at("decode")) {
      SCOPED_TRACE(d.dump());
      EXPECT_TRUE(positive_finite(d.at("tokens_per_s")));
      // Prompt 8, 1 warmup step: the 2 measured steps attend 10 and 11 positions; 4 layers.
      EXPECT_EQ(d.at("kv_bytes").get<uint64_t>(), d.at("batch").get<uint64_t>() * 4 * 416 * 21 / 2);
    }
  }
  EXPECT_EQ(tiny_run("cache16", {}).at("environment").at("cache_bits"), "16,16");
  auto [rc, err] = run_cli(
      {"model", "--model", model_dir(), "--backend", "cpu", "--prefill", "16", "--batch", "1", "--cache-bits", "9"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--cache-bits"), std::string::npos) << err;
}

TEST(ModelBench, BadRankFlagsAreRefusedByName) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--ranks", "0"}, "--ranks: 0"},
      {{"--ranks", "2", "--split", "1"}, "--split: 1 caps for --ranks 2"},
      {{"--ranks", "2", "--split", "1,-1"}, "--split: cap -1"},
      {{"--ranks", "2", "--mode", "pipeline"}, "--mode: 'pipeline'"},
      {{"--ranks", "2", "--devices", "0,1"}, "--devices: only with --backend cuda"},
      {{"--ranks", "2", "--all-reduce", "ring"}, "--all-reduce"},
      {{"--ranks", "2", "--all-reduce", "oneshot"}, "--all-reduce oneshot needs --backend cuda"},
      {{"--ranks", "2", "--split", "0.001,0.001"}, "planning 2 ranks (--mode tp, --split 0.001,0.001)"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"model", "--model", model_dir(), "--backend", "cpu", "--prefill", "16",
                                     "--batch", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto [rc, err] = run_cli(args);
    EXPECT_NE(rc, 0) << c.message;
    EXPECT_NE(err.find(c.message), std::string::npos) << "want \"" << c.message << "\" in: " << err;
  }
}

TEST(ModelBench, UnknownBackendIsRefused) {
  auto [rc, err] = run_cli({"model", "--model", model_dir(), "--backend", "tpu"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--backend"), std::string::npos) << err;
  EXPECT_NE(err.find("tpu"), std::string::npos) << err;
}

TEST(ModelBench, ZeroBatchIsRefused) {
  auto [rc, err] = run_cli({"model", "--model", model_dir(), "--batch", "1,0"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--batch"), std::string::npos) << err;
}

TEST(ModelBench, MissingModelDirIsRefused) {
  const std::string missing = work_path("model_bench/no_such_model");
  auto [rc, err] = run_cli({"model", "--model", missing});
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--model"), std::string::npos) << err;
  EXPECT_NE(err.find("no_such_model"), std::string::npos) << err;
}

TEST(ModelBench, MissingModelFlagIsRefused) {
  auto [rc, err] = run_cli({"model", "--backend", "cpu"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--model"), std::string::npos) << err;
}

}  // namespace
}  // namespace exl3
