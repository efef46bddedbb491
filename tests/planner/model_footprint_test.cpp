// Tests of the model footprint (coordinator/planner/model_footprint.h): unit counts for every
// head_dim and intermediate size, CPU bytes against hand-derived parameter counts for Llama-3-8B
// and 70B shapes, CUDA bytes against what the CUDA worker keeps of the fixture model's file, and
// clear errors for missing tensors.
#include "coordinator/planner/model_footprint.h"

#include <filesystem>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "planner/llama_shapes.h"

namespace exl3 {
namespace {


// Parameters of a Llama model counted by hand: q, k, v, o, gate, up, down, two norms per layer;
// embedding, final norm, lm_head.
uint64_t llama_parameters(const ModelConfig& c) {
  const uint64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim,
                 i = c.intermediate_size, v = c.vocab_size;
  const uint64_t layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h;
  return c.num_layers * layer + v * h + h + h * v;
}

TEST(ModelFootprint, Llama3_8bUnitsAndCpuBytes) {
  auto fp = build_model_footprint(testing::llama3_8b_config(), BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  ASSERT_EQ(fp->layers.size(), 32u);
  const ComponentFootprint& a = fp->layers[5].attention;
  EXPECT_EQ(a.units, 8);  // one KV head per unit: 128 % 128 == 0
  EXPECT_EQ(a.unit_size, 1);
  // q 4096x512 + k, v 4096x128 + o 512x4096, fp32.
  EXPECT_EQ(a.unit_weight_bytes(), 4u * (4096 * 512 + 2 * 4096 * 128 + 512 * 4096));
  EXPECT_EQ(a.cache_bytes(0, 1, 1000), 1000u * 2 * 128 * 4);
  const ComponentFootprint& m = fp->layers[5].mlp;
  EXPECT_EQ(m.units, 112);
  EXPECT_EQ(m.unit_weight_bytes(), 4u * 3 * 4096 * 128);
  EXPECT_EQ(fp->head.units, 1002);
  EXPECT_EQ(fp->head.unit_weight_bytes(), 4u * 4096 * 128);
  EXPECT_EQ(fp->total_weight_bytes(), 4 * llama_parameters(testing::llama3_8b_config()));
  EXPECT_EQ(fp->replicated_bytes(), 4u * (128256 * 4096 + 32 * 2 * 4096 + 4096));
  EXPECT_EQ(fp->total_cache_bytes(256), 32u * 256 * 8 * 128 * 2 * 4);
  // Workspace: 4 bytes x (4 hidden + 2 q + 2 kv + 3 intermediate + vocab) per token, a score row per
  // token and position, and one head's K and V rows per position.
  const uint64_t per_token = 4u * (4 * 4096 + 2 * 4096 + 2 * 1024 + 3 * 14336 + 128256);
  EXPECT_EQ(fp->workspace.bytes(256, 8192), 256 * per_token + 256u * 8192 * 4 + 8192u * 2 * 128 * 4);
  EXPECT_TRUE(fp->notes.empty());
}

TEST(ModelFootprint, Llama3_70bCpuBytes) {
  auto fp = build_model_footprint(testing::llama31_70b_config(), BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_EQ(fp->total_weight_bytes(), 4 * llama_parameters(testing::llama31_70b_config()));
  EXPECT_EQ(fp->layers[0].attention.units, 8);
  EXPECT_EQ(fp->layers[0].mlp.units, 224);
}

TEST(ModelFootprint, KvHeadGroupsFollowHeadDim) {
  EXPECT_EQ(kv_heads_per_unit(testing::llama_config(1, 512, 8, 4, 64, 512, 256)), 2);  // 2 x 64 = 128
  EXPECT_EQ(kv_heads_per_unit(testing::llama_config(1, 768, 8, 8, 96, 512, 256)), 4);  // 4 x 96 = 384
  EXPECT_EQ(kv_heads_per_unit(testing::llama_config(1, 4096, 32, 8, 128, 512, 256)), 1);
  EXPECT_EQ(kv_heads_per_unit(testing::llama_config(1, 4096, 16, 16, 256, 512, 256)), 1);
  // 6 KV heads of 96 cannot be cut on 128-feature boundaries except whole: one unit, and a note.
  auto fp = build_model_footprint(testing::llama_config(2, 576, 6, 6, 96, 512, 256), BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_EQ(fp->layers[0].attention.units, 1);
  EXPECT_EQ(fp->layers[0].attention.unit_size, 6);
  ASSERT_EQ(fp->notes.size(), 1u);
  EXPECT_NE(fp->notes[0].find("attention is not split"), std::string::npos) << fp->notes[0];
}

TEST(ModelFootprint, PartialLastUnits) {
  ModelConfig c = testing::llama_config(2, 512, 8, 4, 64, 1000, 32001);
  c.architecture = Architecture::kQwen2;  // q/k/v biases assumed without headers
  auto fp = build_model_footprint(c, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const ComponentFootprint& m = fp->layers[0].mlp;
  EXPECT_EQ(m.units, 8);
  EXPECT_EQ(m.feature(7), 896);
  EXPECT_EQ(m.feature(8), 1000);
  EXPECT_EQ(m.weight_bytes(7, 8), 4u * 3 * 512 * 104);
  EXPECT_EQ(m.weight_bytes(0, 8), m.weight_bytes(0, 7) + m.weight_bytes(7, 8));
  EXPECT_EQ(fp->head.units, 251);
  EXPECT_EQ(fp->head.weight_bytes(250, 251), 4u * 512 * 1);
  // Attention units of 2 KV heads: q 512x256 + k, v 512x128 + o 256x512, plus q/k/v bias slices.
  EXPECT_EQ(fp->layers[0].attention.unit_weight_bytes(), 4u * (512 * 256 + 2 * 512 * 128 + 256 * 512 + 256 + 2 * 128));
  ASSERT_EQ(fp->notes.size(), 1u);
  EXPECT_NE(fp->notes[0].find("104 of 128 columns"), std::string::npos) << fp->notes[0];
}

// Qwen3's q/k norms belong to attention: a rank holding no KV heads of a layer holds none of them.
TEST(ModelFootprint, QkNormsGoWithAttention) {
  ModelConfig c = testing::llama_config(2, 512, 8, 4, 64, 512, 1000);
  c.architecture = Architecture::kQwen3;
  c.qk_norm = true;
  auto fp = build_model_footprint(c, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const ComponentFootprint& a = fp->layers[0].attention;
  EXPECT_EQ(a.weight_bytes(0, 0), 0u);
  EXPECT_EQ(a.weight_bytes(0, 1), 4u * (512 * 256 + 2 * 512 * 128 + 256 * 512) + 2 * 64 * 4);
  EXPECT_EQ(fp->layers[0].norm_bytes, 2u * 512 * 4);
}

TEST(ModelFootprint, TiedEmbeddingsGiveADenseHead) {
  ModelConfig c = testing::llama_config(2, 512, 8, 4, 64, 512, 1000);
  c.tie_word_embeddings = true;
  auto fp = build_model_footprint(c, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  EXPECT_TRUE(fp->head_from_embedding);
  EXPECT_EQ(fp->head.weight_bytes(0, fp->head.units), 4u * 512 * 1000);
}

TEST(ModelFootprint, BackendNamesAndCudaNeedsHeaders) {
  EXPECT_EQ(*parse_backend("cpu"), BackendKind::kCpu);
  EXPECT_EQ(*parse_backend("cuda"), BackendKind::kCuda);
  EXPECT_EQ(parse_backend("gpu").status().code(), absl::StatusCode::kInvalidArgument);
  auto fp = build_model_footprint(testing::llama3_8b_config(), BackendKind::kCuda);
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
}

class FixtureFootprint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::source_path("models/exl3-4.0bpw");
    auto config = load_model_config(dir_);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto tensors = SafetensorsCollection::open_dir(dir_);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    tensors_ = std::make_unique<SafetensorsCollection>(std::move(*tensors));
  }
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<SafetensorsCollection> tensors_;
};

TEST_F(FixtureFootprint, CpuBytesMatchTheConfigAlone) {
  auto with = build_model_footprint(config_, BackendKind::kCpu, tensors_.get());
  auto without = build_model_footprint(config_, BackendKind::kCpu);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(with->total_weight_bytes(), 4 * llama_parameters(config_));
  EXPECT_EQ(with->total_weight_bytes(), without->total_weight_bytes());
  EXPECT_EQ(with->layers[0].attention.units, 2);  // head_dim 64: units of 2 KV heads
  EXPECT_EQ(with->layers[0].mlp.units, 12);
  EXPECT_EQ(with->head.units, 32);
  EXPECT_DOUBLE_EQ(with->decoder_bits, 4.0);
  EXPECT_EQ(with->head_bits, 6);
  EXPECT_DOUBLE_EQ(without->decoder_bits, 0.0);
}

// One rank holding everything must account for exactly what the CUDA worker keeps on the device:
// EXL3 tensors as stored without the codebook markers, norms and biases as F32, dense weights as
// F16; the embedding as stored, in pinned host memory (not device memory).
TEST_F(FixtureFootprint, CudaBytesAreWhatTheCudaWorkerKeeps) {
  auto fp = build_model_footprint(config_, BackendKind::kCuda, tensors_.get());
  ASSERT_TRUE(fp.ok()) << fp.status();
  auto ends_with = [](const std::string& s, const std::string& end) {
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
  };
  uint64_t kept = 0, markers = 0;
  for (const std::string& name : tensors_->names()) {
    const TensorInfo* info = tensors_->find(name);
    const uint64_t stored = info->end - info->begin;
    uint64_t numel = 1;
    for (int64_t d : info->shape) numel *= static_cast<uint64_t>(d);
    if (ends_with(name, ".mcg") || ends_with(name, ".mul1")) {
      markers += stored;
    } else if (ends_with(name, "norm.weight") || ends_with(name, ".bias")) {
      kept += 4 * numel;
    } else if (name == "model.embed_tokens.weight") {
      continue;  // host memory
    } else if (ends_with(name, ".weight")) {
      kept += 2 * numel;
    } else {
      kept += stored;
    }
  }
  EXPECT_GT(markers, 0u);  // the fixture has codebook markers, which stay on the host
  EXPECT_EQ(fp->total_weight_bytes(), kept);
  EXPECT_EQ(fp->embedding_bytes, 0u);
  EXPECT_EQ(fp->embedding_host_bytes, 2u * 4096 * 512);  // BF16 as stored
  EXPECT_EQ(fp->final_norm_bytes, 4u * 512);
  // Split in two, each half keeps the full suh of a column split and the full svh of a row split.
  const ComponentFootprint& m = fp->layers[1].mlp;
  const uint64_t whole = m.weight_bytes(0, m.units);
  const uint64_t halves = m.weight_bytes(0, 6) + m.weight_bytes(6, 12);
  EXPECT_EQ(halves - whole, 2u * 512 + 2u * 512 + 2u * 512);  // gate, up suh; down svh
}

TEST_F(FixtureFootprint, MissingTensorIsNamed) {
  auto file = SafetensorsFile::open(dir_ + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, info] : (*file)->tensors()) {
    if (name.rfind("model.layers.2.mlp.up_proj.", 0) == 0) continue;
    tensors[name] = *(*file)->get(name);
  }
  const std::string dir = testing::work_path("planner-missing-up");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", tensors).ok());
  auto collection = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(collection.ok()) << collection.status();
  auto fp = build_model_footprint(config_, BackendKind::kCpu, &*collection);
  ASSERT_EQ(fp.status().code(), absl::StatusCode::kNotFound) << fp.status();
  EXPECT_NE(fp.status().message().find("model.layers.2.mlp.up_proj"), std::string::npos) << fp.status();
}

}  // namespace
}  // namespace exl3
