// exl3-bench make-model: synthetic EXL3 models load with our loader (config, every linear's K and
// codebook, shards + index, tokenizer) and run a forward with finite, non-constant logits; mixed
// K meets the target; bytes are deterministic; bad flags fail with clear messages.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "bench/exl3_bench_cli.h"
#include "bench/make_model.h"
#include "bench/synthetic_tokenizer.h"
#include "common/test_paths.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "bench/bench_cli.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "worker/loader/safetensors.h"
#include "worker/model/config.h"
#include "worker/model/linear.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

using testing::run_cli;

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::work_path;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

MakeModelOptions tiny_options(const std::string& dir_name) {
  MakeModelOptions o;
  o.plan.shape = "tiny";
  o.out_dir = work_path("make_model/" + dir_name);
  o.threads = 2;
  o.overwrite = true;
  return o;
}


Codebook codebook_of(const std::string& name) {
  return name == "mul1" ? Codebook::kMul1 : name == "mcg" ? Codebook::kMcg : Codebook::k3Inst;
}

struct ModelCase {
  std::string codebook;
  double bpw;
  int head_bits;
  int64_t layers = 2;
};

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.codebook << " " << c.bpw << " bpw, head " << c.head_bits << " bits, " << c.layers << " layers";
}

class TinyModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(TinyModel, LoadsWithEveryLinearAsPlannedAndGivesFiniteLogits) {
  const ModelCase& c = GetParam();
  MakeModelOptions o = tiny_options(absl::StrCat("tiny_", c.codebook, "_", c.bpw, "_", c.head_bits));
  o.plan.codebook = c.codebook;
  o.plan.bpw = c.bpw;
  o.plan.head_bits = c.head_bits;
  o.plan.layers = c.layers;
  o.plan.seed = 7;
  auto report = make_model(o);
  ASSERT_TRUE(report.ok()) << report.status();
  auto plan = plan_model(o.plan);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const fs::path dir(o.out_dir);

  // The file set of a single-shard model.
  for (const char* f : {"config.json", "quantization_config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "model.safetensors"}) {
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  }
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  ASSERT_EQ(report->files.size(), 1u);

  // config.json parses to the shape, with quantization_config describing the run.
  auto config = load_model_config(o.out_dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->hidden_size, 256);
  EXPECT_EQ(config->num_layers, c.layers);
  EXPECT_EQ(config->num_heads, 4);
  EXPECT_EQ(config->num_kv_heads, 2);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->intermediate_size, 512);
  EXPECT_EQ(config->vocab_size, 1024);
  const json q = read_json(dir / "config.json")["quantization_config"];
  EXPECT_EQ(q["quant_method"], "exl3");
  EXPECT_EQ(q["head_bits"], c.head_bits);
  EXPECT_EQ(q["codebook"], c.codebook);
  EXPECT_NEAR(q["bits"].get<double>(), report->decoder_bits, 0.005);
  EXPECT_NEAR(report->decoder_bits, c.bpw, 0.05);

  // Every linear loads with the planned K and codebook; its marker tensor holds the locked value.
  auto tensors = SafetensorsCollection::open_dir(o.out_dir);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  std::set<std::string> codebooks_seen;
  double weighted_bits = 0.0, weights = 0.0;
  for (const PlannedLinear& l : plan->linears) {
    auto lin = Linear::load(*tensors, l.prefix, l.in_features, l.out_features, {}, *backend);
    ASSERT_TRUE(lin.ok()) << l.prefix << ": " << lin.status();
    EXPECT_EQ(lin->info().bits, l.bits) << l.prefix;
    EXPECT_EQ(lin->info().exl3, l.bits != 16) << l.prefix;
    EXPECT_EQ(lin->info().in_features, l.in_features);
    EXPECT_EQ(lin->info().out_features, l.out_features);
    if (l.bits != 16) {
      EXPECT_EQ(lin->info().codebook, codebook_of(l.codebook)) << l.prefix;
      codebooks_seen.insert(l.codebook);
      if (l.codebook != "3inst") {
        const Tensor m = *tensors->get_checked(l.prefix + "." + l.codebook, DType::kI32, {});
        EXPECT_EQ(m.data<int32_t>()[0], l.codebook == "mcg" ? -877912083 : -2082680531);
      }
      EXPECT_FALSE(tensors->has(l.prefix + (l.codebook == "mcg" ? ".mul1" : ".mcg")));
    }
    if (l.decoder) {
      weighted_bits += static_cast<double>(l.bits) * l.in_features * l.out_features;
      weights += static_cast<double>(l.in_features) * l.out_features;
    }
  }
  EXPECT_NEAR(weighted_bits / weights, report->decoder_bits, 1e-9);
  if (c.codebook == "mixed") {
    EXPECT_EQ(codebooks_seen, (std::set<std::string>{"mul1", "mcg", "3inst"}));
  } else {
    EXPECT_EQ(codebooks_seen, std::set<std::string>{c.codebook});
  }

  // The whole model loads and its logits are finite, vary over the vocabulary and have RMS near 1
  // (the suh scaling keeps activations O(1); see bench/model_plan.cpp).
  auto model = LlamaModel::load(o.out_dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NEAR((*model)->decoder_bits_per_weight(), report->decoder_bits, 1e-9);
  const std::vector<int32_t> ids = {1, 72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 1000, 5, 700, 3, 250};
  const Tensor logits = forward_sequence(**model, ids, {});
  ASSERT_EQ(logits.dim(0), static_cast<int64_t>(ids.size()));
  ASSERT_EQ(logits.dim(1), 1024);
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    double sum = 0.0, sq = 0.0;
    const float* row = logits.data<float>() + r * 1024;
    for (int64_t v = 0; v < 1024; ++v) {
      ASSERT_TRUE(std::isfinite(row[v])) << "position " << r << " token " << v;
      sum += row[v];
      sq += static_cast<double>(row[v]) * row[v];
    }
    const double mean = sum / 1024, stddev = std::sqrt(std::max(0.0, sq / 1024 - mean * mean));
    if (r == 0 || r + 1 == logits.dim(0)) std::printf("position %lld: logits mean %.3f std %.3f\n", static_cast<long long>(r), mean, stddev);
    EXPECT_GT(stddev, 0.3) << "position " << r << ": logits nearly constant";
    EXPECT_LT(stddev, 3.0) << "position " << r << ": logits blow up";
  }
}

INSTANTIATE_TEST_SUITE_P(Codebooks, TinyModel,
                         ::testing::Values(ModelCase{"mul1", 2.5, 6}, ModelCase{"mcg", 4.0, 6},
                                           ModelCase{"3inst", 2.5, 5}, ModelCase{"mixed", 4.0, 16},
                                           ModelCase{"mixed", 2.5, 8}, ModelCase{"mul1", 1.0, 1},
                                           ModelCase{"mcg", 8.0, 8}, ModelCase{"mul1", 4.0, 6, 32}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.codebook, "_", static_cast<int>(info.param.bpw * 10),
                                               "bpw_head", info.param.head_bits, "_", info.param.layers, "layers");
                         });

// Each EXL3 linear maps inputs of RMS 1 to outputs of RMS about 1, for every codebook and K.
TEST(MakeModel, LinearsPreserveActivationScale) {
  MakeModelOptions o = tiny_options("scale");
  o.plan.codebook = "mixed";
  o.plan.bpw = 3.5;
  ASSERT_TRUE(make_model(o).ok());
  auto plan = plan_model(o.plan);
  auto tensors = SafetensorsCollection::open_dir(o.out_dir);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  const int64_t m = 8;
  ASSERT_TRUE(backend->reserve_scratch(m, 1024).ok());
  uint64_t state = 11;
  for (const PlannedLinear& l : plan->linears) {
    auto lin = Linear::load(*tensors, l.prefix, l.in_features, l.out_features, {}, *backend);
    ASSERT_TRUE(lin.ok()) << lin.status();
    std::vector<float> x(m * l.in_features);
    for (float& v : x) v = (splitmix64(state) & 1) ? 1.0f : -1.0f;  // RMS exactly 1
    Tensor y = Tensor::zeros(DType::kF32, {m, l.out_features});
    backend->linear(lin->weights(), Tensor::from_vector(x, {m, l.in_features}), y);
    double sq = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) sq += static_cast<double>(y.data<float>()[i]) * y.data<float>()[i];
    const double rms = std::sqrt(sq / y.numel());
    EXPECT_GT(rms, 0.8) << l.prefix << " K=" << l.bits << " " << l.codebook;
    EXPECT_LT(rms, 1.25) << l.prefix << " K=" << l.bits << " " << l.codebook;
  }
}

// Small shard limits split the model into whole modules, listed by the index, and it still loads.
TEST(MakeModel, ShardsHoldWholeModulesAndTheIndexListsEveryTensor) {
  MakeModelOptions o = tiny_options("sharded");
  o.plan.layers = 6;
  o.shard_mib = 1;
  auto report = make_model(o);
  ASSERT_TRUE(report.ok()) << report.status();
  const fs::path dir(o.out_dir);
  const size_t n = report->files.size();
  ASSERT_GE(n, 3u);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(fs::path(report->files[i]).filename(), absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, n));
  }
  const json index = read_json(dir / "model.safetensors.index.json");
  uint64_t total = 0;
  std::map<std::string, std::string> module_file;
  auto tensors = SafetensorsCollection::open_dir(o.out_dir);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(index["weight_map"].size(), tensors->names().size());
  for (const auto& [name, file] : index["weight_map"].items()) {
    ASSERT_TRUE(tensors->has(name)) << name;
    EXPECT_EQ(fs::path(tensors->file_of(name)).filename(), file.get<std::string>());
    total += tensors->find(name)->end - tensors->find(name)->begin;
    // A module (embedding, one layer, norm, head) never spans two files.
    std::string module = name.rfind("model.layers.", 0) == 0 ? name.substr(0, name.find('.', 13)) : name.substr(0, name.rfind('.'));
    auto [it, inserted] = module_file.emplace(module, file.get<std::string>());
    EXPECT_EQ(it->second, file.get<std::string>()) << name;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  for (const std::string& f : report->files) EXPECT_LE(fs::file_size(f), (1u << 20) + 65536) << f;
  auto model = LlamaModel::load(o.out_dir);
  ASSERT_TRUE(model.ok()) << model.status();
}

// The target mean K is met for real shapes too (plans only; nothing is written).
TEST(MakeModel, MixedBitsHitTheTarget) {
  for (const char* shape : {"llama-3.1-8b", "llama-3.1-70b", "qwen2.5-32b", "tiny"}) {
    for (double bpw : {2.5, 3.25, 4.0, 5.1}) {
      ModelPlanOptions o;
      o.shape = shape;
      o.bpw = bpw;
      o.seed = 3;
      auto plan = plan_model(o);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_NEAR(plan->decoder_bits, bpw, 0.05) << shape;
      std::set<int> ks;
      for (const PlannedLinear& l : plan->linears) {
        if (l.decoder) ks.insert(l.bits);
      }
      const std::set<int> expected = bpw == std::floor(bpw) ? std::set<int>{static_cast<int>(bpw)}
                                                            : std::set<int>{static_cast<int>(bpw), static_cast<int>(bpw) + 1};
      EXPECT_EQ(ks, expected) << shape << " " << bpw;
    }
  }
}

// Real shapes have the tensor sizes of their Hugging Face checkpoints.
TEST(MakeModel, RealShapesHaveTheirTensorSizes) {
  ModelPlanOptions o;
  o.shape = "llama-3.1-70b";
  o.bpw = 4.0;
  auto plan = plan_model(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_layers, 80);
  // Decoder weights at 4 bits, bf16 embedding, 6-bit head, suh/svh fp16, norms bf16, markers.
  const uint64_t h = 8192, mlp = 28672, v = 128256, kv = 1024;
  const uint64_t layer_weights = h * h * 2 + h * kv * 2 + 3 * h * mlp;
  const uint64_t layer_scales = 2 * (4 * h + h + 2 * kv + h + 2 * h + 2 * mlp + mlp + h) + 2 * 2 * h + 7 * 4;
  const uint64_t expected = 80 * (layer_weights / 2 + layer_scales) + v * h * 2 + 2 * h + h * v * 6 / 8 + 2 * (h + v) + 4;
  EXPECT_EQ(plan->total_bytes(), expected);
  o.shape = "qwen2.5-32b";
  plan = plan_model(o);
  ASSERT_TRUE(plan.ok());
  int biases = 0;
  for (const PlannedModule& m : plan->modules) {
    for (const StreamTensor& t : m.tensors) biases += t.name.ends_with(".bias");
  }
  EXPECT_EQ(biases, 64 * 3);
}

// config.json of each shape parses to the published architecture facts.
TEST(MakeModel, ShapeConfigsParseToTheirArchitectures) {
  for (const char* name : {"llama-3.1-8b", "llama-3.1-70b"}) {
    const ModelShape& shape = *find_model_shape(name);
    auto c = parse_model_config(hf_config_json(shape, shape.num_layers).dump(), name);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->architecture, Architecture::kLlama);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->num_kv_heads, 8);
    EXPECT_EQ(c->vocab_size, 128256);
    EXPECT_EQ(c->max_position_embeddings, 131072);
    EXPECT_EQ(c->rms_norm_eps, 1e-5);
    EXPECT_EQ(c->rope.type, RopeType::kLlama3);
    EXPECT_EQ(c->rope.theta, 500000.0);
    EXPECT_EQ(c->rope.factor, 8.0);
    EXPECT_EQ(c->rope.low_freq_factor, 1.0);
    EXPECT_EQ(c->rope.high_freq_factor, 4.0);
    EXPECT_EQ(c->rope.original_max_position, 8192);
    EXPECT_EQ(c->bos_token_id, 128000);
    EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{128001});
    EXPECT_FALSE(c->tie_word_embeddings);
  }
  auto c8 = parse_model_config(hf_config_json(*find_model_shape("llama-3.1-8b"), 32).dump(), "8b");
  EXPECT_EQ(c8->hidden_size, 4096);
  EXPECT_EQ(c8->num_layers, 32);
  EXPECT_EQ(c8->num_heads, 32);
  EXPECT_EQ(c8->intermediate_size, 14336);
  auto c70 = parse_model_config(hf_config_json(*find_model_shape("llama-3.1-70b"), 80).dump(), "70b");
  EXPECT_EQ(c70->hidden_size, 8192);
  EXPECT_EQ(c70->num_layers, 80);
  EXPECT_EQ(c70->num_heads, 64);
  EXPECT_EQ(c70->intermediate_size, 28672);
  auto q = parse_model_config(hf_config_json(*find_model_shape("qwen2.5-32b"), 64).dump(), "qwen");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->architecture, Architecture::kQwen2);
  EXPECT_EQ(q->hidden_size, 5120);
  EXPECT_EQ(q->num_layers, 64);
  EXPECT_EQ(q->num_heads, 40);
  EXPECT_EQ(q->num_kv_heads, 8);
  EXPECT_EQ(q->head_dim, 128);
  EXPECT_EQ(q->intermediate_size, 27648);
  EXPECT_EQ(q->vocab_size, 152064);
  EXPECT_EQ(q->rope.type, RopeType::kDefault);
  EXPECT_EQ(q->rope.theta, 1e6);
  EXPECT_EQ(q->rms_norm_eps, 1e-6);
}

// --tokenizer copies tokenizer.json (and the tokenizer_config.json beside it) unchanged.
TEST(MakeModel, CopiesAGivenTokenizer) {
  MakeModelOptions o = tiny_options("copied_tokenizer");
  o.tokenizer_path = testing::source_path("models/exl3-4.0bpw/tokenizer.json");
  ASSERT_TRUE(make_model(o).ok());
  EXPECT_EQ(read_bytes(fs::path(o.out_dir) / "tokenizer.json"), read_bytes(o.tokenizer_path));
  EXPECT_EQ(read_bytes(fs::path(o.out_dir) / "tokenizer_config.json"),
            read_bytes(testing::source_path("models/exl3-4.0bpw/tokenizer_config.json")));
  auto tok = Tokenizer::from_model_dir(o.out_dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->bos_id(), 0);
}

TEST(MakeModel, SameSeedSameBytesWhateverTheThreadCount) {
  MakeModelOptions a = tiny_options("seed_a"), b = tiny_options("seed_b"), c = tiny_options("seed_c");
  a.threads = 1;
  b.threads = 3;
  c.plan.seed = 1;
  ASSERT_TRUE(make_model(a).ok());
  ASSERT_TRUE(make_model(b).ok());
  ASSERT_TRUE(make_model(c).ok());
  const std::string bytes_a = read_bytes(fs::path(a.out_dir) / "model.safetensors");
  EXPECT_EQ(bytes_a, read_bytes(fs::path(b.out_dir) / "model.safetensors"));
  const std::string bytes_c = read_bytes(fs::path(c.out_dir) / "model.safetensors");
  ASSERT_EQ(bytes_a.size(), bytes_c.size());
  EXPECT_NE(bytes_a, bytes_c);
}

// The generated tokenizer loads with BOS/EOS at the shape's ids (sparse for Llama 3.1) and
// round-trips text.
TEST(MakeModel, SyntheticTokenizerLoads) {
  for (const char* name : {"tiny", "llama-3.1-8b", "qwen2.5-32b"}) {
    const ModelShape& shape = *find_model_shape(name);
    const fs::path dir = work_path(std::string("make_model/tokenizer_") + name);
    fs::create_directories(dir);
    ASSERT_TRUE(write_synthetic_tokenizer(dir.string(), shape).ok());
    std::ofstream(dir / "config.json") << hf_config_json(shape, 1).dump();
    auto tok = Tokenizer::from_model_dir(dir.string());
    ASSERT_TRUE(tok.ok()) << name << ": " << tok.status();
    EXPECT_EQ(tok->bos_id(), shape.bos_token_id) << name;
    EXPECT_TRUE(tok->eos_ids().count(shape.eos_token_id)) << name;
    EXPECT_LE(tok->vocab_size(), shape.vocab_size) << name;
    const std::string text = "Hello, wörld!\n";
    const std::vector<int32_t> ids = tok->encode(text);
    EXPECT_EQ(ids.size(), text.size()) << name;
    EXPECT_EQ(tok->decode(ids), text) << name;
    EXPECT_EQ(tok->encode(shape.bos_token), std::vector<int32_t>{shape.bos_token_id}) << name;
  }
}

TEST(MakeModelCli, WritesAModelAndReportsIt) {
  const std::string out = work_path("make_model/cli");
  fs::remove_all(out);
  const auto [rc, err] = run_cli({"make-model", "--shape", "tiny", "--out", out, "--bpw", "3.5", "--threads", "2"});
  EXPECT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("mean K 3.5"), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(fs::path(out) / "model.safetensors"));
  // A second run into the same directory needs --overwrite.
  const auto [rc2, err2] = run_cli({"make-model", "--shape", "tiny", "--out", out});
  EXPECT_NE(rc2, 0);
  EXPECT_NE(err2.find("--overwrite"), std::string::npos) << err2;
  const auto [rc3, err3] = run_cli({"make-model", "--shape", "tiny", "--out", out, "--overwrite"});
  EXPECT_EQ(rc3, 0) << err3;
}

TEST(MakeModelCli, BadFlagsFailWithClearMessages) {
  const std::string out = work_path("make_model/bad");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const fs::path file = work_path("make_model/a_regular_file");
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "x";
  const std::vector<Case> cases = {
      {{"make-model", "--shape", "llama-9b", "--out", out}, "unknown shape \"llama-9b\""},
      {{"make-model", "--shape", "tiny", "--out", out, "--bpw", "0.5"}, "--bpw: 0.5 is outside 1..8"},
      {{"make-model", "--shape", "tiny", "--out", out, "--bpw", "8.5"}, "--bpw: 8.5 is outside 1..8"},
      {{"make-model", "--shape", "tiny", "--out", out, "--head-bits", "12"}, "--head-bits: 12"},
      {{"make-model", "--shape", "tiny", "--out", out, "--codebook", "foo"}, "--codebook: \"foo\""},
      {{"make-model", "--shape", "tiny", "--out", (file / "model").string()}, "--out: cannot create directory"},
      {{"make-model", "--shape", "tiny", "--out", file.string()}, "is not a directory"},
      {{"make-model", "--shape", "tiny", "--out", out, "--tokenizer", "/nonexistent/tokenizer.json"}, "--tokenizer"},
      {{"make-model", "--shape", "tiny"}, "--out is required"},
      {{"make-model", "--shape", "tiny", "--out", out, "--layers", "0"}, "--layers"},
      {{"make-model", "--shape", "tiny", "--out", out, "--bpw", "four"}, "--bpw"},
      {{}, "subcommand"},
  };
  for (const Case& c : cases) {
    const auto [rc, err] = run_cli(c.args);
    EXPECT_NE(rc, 0) << absl::StrJoin(c.args, " ");
    EXPECT_NE(err.find(c.message), std::string::npos) << absl::StrJoin(c.args, " ") << "\nstderr: " << err;
  }
  EXPECT_FALSE(fs::exists(fs::path(out) / "config.json"));
}

}  // namespace
}  // namespace exl3
