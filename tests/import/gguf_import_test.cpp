// exl3-import end to end (import/hf_writer.h) on tests/data/gguf/tiny-llama.gguf (a 5-layer llama
// holding every supported tensor type, Q/K rows in llama.cpp's order, a byte-level BPE tokenizer
// with control and user-defined tokens, a ChatML template): every written fp32 tensor equals the
// `gguf` package's dequantization with Q/K rows back in HF order (FNV-1a 64 of the bytes); the
// written config.json / tokenizer files; the directory loads with LlamaModel::load and its logits
// match an fp64 numpy forward of the HF-order weights; the tokenizer encodes as transformers'
// tokenizer built from the same GGUF. Also the Q/K un-permutation on a hand case and the
// SentencePiece ("llama") tokenizer path on tests/data/gguf/tiny-spm.gguf.
#include "import/hf_writer.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/test_paths.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "import/gguf_test_util.h"
#include "import/qk_permute.h"
#include "nlohmann/json.hpp"
#include "worker/kv_cache.h"
#include "worker/loader/safetensors.h"
#include "worker/model/llama_model.h"

namespace exl3 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A path in a folder of this process's own: ctest runs each case as its own process, several at
// once, so the cases of a suite must not share (and remove) each other's folders.
std::string own_path(const std::string& name) {
  return testing::work_path("gguf-import-" + std::to_string(::getpid()) + "/" + name);
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = own_path(name);
  fs::remove_all(dir);
  return dir;
}

TEST(QkPermute, HandCase) {
  // One head of width 4, 1 column: GGUF rows [g0, g1, g2, g3] hold HF rows [h0, h2, h1, h3].
  const std::vector<float> gguf = {10, 11, 12, 13};
  std::vector<float> hf(4);
  unpermute_qk_rows(gguf.data(), hf.data(), 4, 1, 1);
  EXPECT_EQ(hf, (std::vector<float>{10, 12, 11, 13}));
  // Two heads of width 6, 2 columns: within each head, GGUF row 2j+i is HF row i*3+j.
  std::vector<float> in(12 * 2), out(12 * 2), back(12 * 2);
  for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(k);
  unpermute_qk_rows(in.data(), out.data(), 12, 2, 2);
  const int expected_source_row[12] = {0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11};
  for (int r = 0; r < 12; ++r) {
    EXPECT_EQ(out[r * 2], static_cast<float>(expected_source_row[r] * 2)) << r;
    EXPECT_EQ(out[r * 2 + 1], static_cast<float>(expected_source_row[r] * 2 + 1)) << r;
  }
  permute_qk_rows(out.data(), back.data(), 12, 2, 2);
  EXPECT_EQ(back, in);
}

class TinyLlamaImport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fresh_dir("tiny-llama-f32"));
    ImportOptions options;
    options.dtype = DType::kF32;
    options.max_shard_bytes = 500000;  // several shards and an index
    auto s = import_gguf(testing::test_data("gguf/tiny-llama.gguf"), *dir_, options);
    status_ = new absl::Status(s.status());
    if (s.ok()) shards_ = s->shards;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete status_;
  }
  void SetUp() override { ASSERT_TRUE(status_->ok()) << *status_; }

  static std::string* dir_;
  static absl::Status* status_;
  static int shards_;
};
std::string* TinyLlamaImport::dir_ = nullptr;
absl::Status* TinyLlamaImport::status_ = nullptr;
int TinyLlamaImport::shards_ = 0;

TEST_F(TinyLlamaImport, TensorsEqualGgufDequantization) {
  EXPECT_GT(shards_, 1);
  EXPECT_TRUE(fs::exists(*dir_ + "/model.safetensors.index.json"));
  const json ref = read_json(testing::test_data("gguf/tiny_llama_ref.json"));
  auto tensors = SafetensorsCollection::open_dir(*dir_);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->names().size(), ref["tensors"].size());
  for (const auto& [name, want] : ref["tensors"].items()) {
    auto t = tensors->get(name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    ASSERT_EQ(t->dtype(), DType::kF32) << name;
    EXPECT_EQ(t->shape(), want["shape"].get<std::vector<int64_t>>()) << name;
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(testing::fnv1a64(t->raw(), t->nbytes())));
    EXPECT_EQ(std::string(hash), want["fnv1a64"].get<std::string>())
        << name << ": first values " << t->data<float>()[0] << " " << t->data<float>()[1] << ", gguf "
        << want["first"][0] << " " << want["first"][1];
  }
}

TEST_F(TinyLlamaImport, ConfigFiles) {
  const json c = read_json(*dir_ + "/config.json");
  EXPECT_EQ(c["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["num_hidden_layers"], 5);
  EXPECT_EQ(c["hidden_size"], 64);
  EXPECT_EQ(c["intermediate_size"], 256);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["head_dim"], 16);
  EXPECT_EQ(c["vocab_size"], 272);
  EXPECT_EQ(c["max_position_embeddings"], 256);
  EXPECT_EQ(c["rms_norm_eps"].get<double>(), static_cast<double>(1e-5f));  // the stored float32
  EXPECT_EQ(c["rope_theta"].get<double>(), 10000.0);
  EXPECT_TRUE(c["rope_scaling"].is_null());
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["torch_dtype"], "float32");
  EXPECT_EQ(c["bos_token_id"], 269);
  EXPECT_EQ(c["eos_token_id"], 270);
  const json tc = read_json(*dir_ + "/tokenizer_config.json");
  EXPECT_EQ(tc["bos_token"], "<|im_start|>");
  EXPECT_EQ(tc["eos_token"], "<|im_end|>");
  EXPECT_EQ(tc["unk_token"], "<|endoftext|>");
  EXPECT_EQ(tc["pad_token"], "<|endoftext|>");
  EXPECT_EQ(tc["add_bos_token"], false);
  EXPECT_EQ(tc["model_max_length"], 256);
  EXPECT_NE(tc["chat_template"].get<std::string>().find("<|im_start|>assistant\n"), std::string::npos);
  const json g = read_json(*dir_ + "/generation_config.json");
  EXPECT_EQ(g["bos_token_id"], 269);
  EXPECT_EQ(g["eos_token_id"], 270);
  const json t = read_json(*dir_ + "/tokenizer.json");
  EXPECT_EQ(t["model"]["type"], "BPE");
  EXPECT_EQ(t["model"]["merges"].size(), 12u);
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], "\\p{N}");
  ASSERT_EQ(t["added_tokens"].size(), 4u);
  EXPECT_EQ(t["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(t["added_tokens"][0]["special"], true);
  EXPECT_EQ(t["added_tokens"][3]["content"], "<think>");
  EXPECT_EQ(t["added_tokens"][3]["special"], false);
}

TEST_F(TinyLlamaImport, TokenizerMatchesTransformers) {
  auto tok = Tokenizer::from_model_dir(*dir_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->bos_id(), 269);
  EXPECT_FALSE(tok->add_bos());
  const json ref = read_json(testing::test_data("gguf/tiny_llama_ref.json"));
  for (const json& e : ref["encodings"]) {
    const std::string text = e["text"];
    const std::vector<int32_t> want = e["ids"];
    const std::vector<int32_t> got = tok->encode(text);
    EXPECT_EQ(got, want) << "text: " << json(text).dump();
    EXPECT_EQ(tok->decode(got), text) << "round trip of " << json(text).dump();
  }
}

// The imported model runs on our CPU path; its logits match an fp64 numpy forward of the same
// HF-order weights (so a wrong Q/K order, a swapped tensor or a misread config shows here).
// Tolerance: 2e-3 absolute on logits of magnitude ~1-3 (fp32 accumulation vs fp64).
TEST_F(TinyLlamaImport, LoadsAndMatchesReferenceForward) {
  auto model = LlamaModel::load(*dir_);
  ASSERT_TRUE(model.ok()) << model.status();
  const json ref = read_json(testing::test_data("gguf/tiny_llama_ref.json"));
  const std::vector<int32_t> prompt = ref["prompt"];
  const auto& rows = ref["logits_last_rows"];
  const int64_t vocab = 272, n = static_cast<int64_t>(prompt.size());
  KvCache cache((*model)->cache_shape(/*num_pages=*/4, /*page_size=*/16), (*model)->backend());
  PageTable table;
  ASSERT_TRUE(cache.reserve(table, n).ok());
  const Tensor logits = (*model)->forward(prompt, 0, cache, table, LogitsMode::kAll);
  ASSERT_EQ(logits.shape(), (Shape{n, vocab}));
  double max_err = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t row = n - static_cast<int64_t>(rows.size()) + static_cast<int64_t>(r);
    for (int64_t v = 0; v < vocab; ++v) {
      const double want = rows[r][v].get<double>();
      const double got = logits.data<float>()[row * vocab + v];
      max_err = std::max(max_err, std::fabs(got - want));
    }
  }
  std::printf("tiny llama logits vs numpy fp64: max abs error %.3g\n", max_err);
  EXPECT_LT(max_err, 2e-3);
}

TEST(GgufImport, Bf16ImportLoadsAndOutDirRules) {
  const std::string dir = fresh_dir("tiny-llama-bf16");
  ImportOptions options;
  std::vector<std::string> lines;
  options.log = [&](const std::string& line) { lines.push_back(line); };
  auto s = import_gguf(testing::test_data("gguf/tiny-llama.gguf"), dir, options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->shards, 1);
  EXPECT_EQ(s->tensors, 48);
  bool saw_progress = false;
  for (const std::string& l : lines) saw_progress |= l.rfind("[48/48] ", 0) == 0;
  EXPECT_TRUE(saw_progress);
  auto st = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->find("model.layers.0.self_attn.q_proj.weight")->dtype, DType::kBF16);
  auto model = LlamaModel::load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  // A non-empty directory is refused without force.
  auto again = import_gguf(testing::test_data("gguf/tiny-llama.gguf"), dir, ImportOptions{});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(again.status().message()).find("--force"), std::string::npos);
  ImportOptions force;
  force.force = true;
  force.dtype = DType::kF16;
  EXPECT_TRUE(import_gguf(testing::test_data("gguf/tiny-llama.gguf"), dir, force).ok());
}

TEST(GgufImport, RefusesWhatItCannotConvert) {
  // types.gguf has architecture "types-test".
  auto r = import_gguf(testing::test_data("gguf/types.gguf"), fresh_dir("types"), ImportOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("general.architecture \"types-test\" is not supported"),
            std::string::npos)
      << r.status();
  // A truncated file never gets as far as writing.
  const std::string bytes = [] {
    std::ifstream in(testing::test_data("gguf/tiny-llama.gguf"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::string cut = own_path("cut.gguf");
  fs::create_directories(own_path(""));
  {
    std::ofstream out(cut, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 100));
  }
  auto t = import_gguf(cut, fresh_dir("cut"), ImportOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("past the end of the file"), std::string::npos) << t.status();
  EXPECT_FALSE(fs::exists(own_path("cut")));
}

TEST(GgufImport, UnknownPreTokenizerRefusedByName) {
  testing::GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", "gpt2");
  b.kv_string("tokenizer.ggml.pre", "my-new-model");
  b.kv_string_array("tokenizer.ggml.tokens", {"a", "b"});
  b.kv_string_array("tokenizer.ggml.merges", {});
  auto f = testing::parse_bytes(b.build().bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  auto t = make_tokenizer_files(**f, 128);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("tokenizer.ggml.pre \"my-new-model\" is not a pre-tokenizer"),
            std::string::npos)
      << t.status();
}

// Found by gguf_reader_fuzzer: a huge llama.block_count made the tensor plan list every layer's
// tensor names before looking at the file (out of memory); it is now checked against the tensors.
TEST(GgufImport, BlockCountBoundedByTensors) {
  testing::GgufBuilder b;
  b.kv_string("general.architecture", "llama");
  b.kv_u32("llama.block_count", 1u << 30);
  b.kv_u32("llama.embedding_length", 32);
  b.kv_u32("llama.feed_forward_length", 64);
  b.kv_u32("llama.attention.head_count", 2);
  b.kv_u32("llama.context_length", 64);
  b.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  b.tensor("token_embd.weight", {32, 2}, 0, std::string(256, '\0'));
  auto f = testing::parse_bytes(b.build().bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  auto facts = read_llama_facts(**f);
  ASSERT_FALSE(facts.ok());
  EXPECT_NE(std::string(facts.status().message()).find("llama.block_count 1073741824 needs 9 tensors per layer but the "
                                                       "file has 1 tensors"),
            std::string::npos)
      << facts.status();
}

// The SentencePiece path: merges recovered from scores, byte fallback, Metaspace; encodings equal
// transformers' tokenizer built from the same GGUF.
TEST(GgufImport, SentencePieceTokenizerMatchesTransformers) {
  auto f = GgufFile::open(testing::test_data("gguf/tiny-spm.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  auto files = make_tokenizer_files(**f, 512);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::string dir = fresh_dir("tiny-spm");
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << files->tokenizer.dump();
  std::ofstream(dir + "/tokenizer_config.json") << files->tokenizer_config.dump();
  auto tok = Tokenizer::from_model_dir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const json ref = read_json(testing::test_data("gguf/tiny_spm_ref.json"));
  EXPECT_EQ(tok->add_bos(), ref["add_bos_token"].get<bool>());
  for (const json& e : ref["encodings"]) {
    const std::string text = e["text"];
    const std::vector<int32_t> want = e["ids"];
    EXPECT_EQ(tok->encode(text), want) << "text: " << json(text).dump();
  }
}

}  // namespace
}  // namespace exl3
