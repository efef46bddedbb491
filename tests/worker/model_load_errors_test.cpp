// Malformed model directories (missing tensor, wrong dtype or shape, truncated file, bad
// config.json) are refused with an error naming the file and tensor; nothing crashes.
#include <filesystem>
#include <fstream>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "worker/loader/safetensors.h"
#include "worker/model/llama_model.h"

namespace exl3 {
namespace {

namespace fs = std::filesystem;

class ModelLoadErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = testing::source_path("models/exl3-4.0bpw");
    auto file = SafetensorsFile::open(source_ + "/model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    for (const auto& [name, info] : (*file)->tensors()) tensors_[name] = *(*file)->get(name);
  }

  // A copy of the fixture model with `tensors` as its weights; returns its directory.
  std::string make_model(const std::string& tag, const std::map<std::string, Tensor>& tensors) {
    const std::string dir = testing::work_path("bad-model-" + tag);
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(source_ + "/config.json", dir + "/config.json");
    EXPECT_TRUE(write_safetensors(dir + "/model.safetensors", tensors).ok());
    return dir;
  }

  void expect_load_error(const std::string& dir, const std::vector<std::string>& needles) {
    auto model = LlamaModel::load(dir);
    ASSERT_FALSE(model.ok()) << "loaded a malformed model from " << dir;
    const std::string msg(model.status().message());
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }

  std::string source_;
  std::map<std::string, Tensor> tensors_;
};

TEST_F(ModelLoadErrors, MissingTensor) {
  auto t = tensors_;
  t.erase("model.layers.2.input_layernorm.weight");
  expect_load_error(make_model("missing", t), {"model.layers.2.input_layernorm.weight", "missing"});
}

TEST_F(ModelLoadErrors, WrongDtype) {
  auto t = tensors_;
  t["model.norm.weight"] = Tensor::zeros(DType::kI32, {512});
  expect_load_error(make_model("dtype", t), {"model.norm.weight", "I32", "model.safetensors"});
}

TEST_F(ModelLoadErrors, WrongShape) {
  auto t = tensors_;
  t["model.layers.0.self_attn.k_proj.suh"] = Tensor::zeros(DType::kF16, {256});
  expect_load_error(make_model("shape", t), {"model.layers.0.self_attn.k_proj.suh", "[256]", "[512]"});
}

TEST_F(ModelLoadErrors, TrellisOfWrongSize) {
  auto t = tensors_;
  t["model.layers.1.mlp.up_proj.trellis"] = Tensor::zeros(DType::kI16, {32, 96, 20});
  expect_load_error(make_model("trellis", t), {"model.layers.1.mlp.up_proj.trellis", "16*K"});
  t["model.layers.1.mlp.up_proj.trellis"] = Tensor::zeros(DType::kI16, {32, 64, 64});
  expect_load_error(make_model("trellis-dims", t), {"model.layers.1.mlp.up_proj.trellis", "512x1536"});
}

TEST_F(ModelLoadErrors, BothCodebookMarkers) {
  auto t = tensors_;
  t["model.layers.0.mlp.gate_proj.mcg"] = Tensor::zeros(DType::kI32, {});
  expect_load_error(make_model("markers", t), {"model.layers.0.mlp.gate_proj", "mul1"});
}

TEST_F(ModelLoadErrors, TruncatedFile) {
  const std::string dir = make_model("truncated", tensors_);
  const auto size = fs::file_size(dir + "/model.safetensors");
  fs::resize_file(dir + "/model.safetensors", size / 2);
  expect_load_error(dir, {"model.safetensors", "truncated"});
}

TEST_F(ModelLoadErrors, BadConfigJson) {
  const std::string dir = make_model("config", tensors_);
  std::ofstream(dir + "/config.json") << "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": ";
  expect_load_error(dir, {"config.json", "JSON"});
}

TEST_F(ModelLoadErrors, ConfigDisagreesWithTensors) {
  const std::string dir = make_model("mismatch", tensors_);
  std::ifstream in(source_ + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"intermediate_size\": 1536"), 25, "\"intermediate_size\": 2048");
  std::ofstream(dir + "/config.json") << text;
  expect_load_error(dir, {"model.layers.0.mlp.gate_proj.trellis", "512x2048"});
}

}  // namespace
}  // namespace exl3
