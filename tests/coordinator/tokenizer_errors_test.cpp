// Loading refuses what it cannot do right: malformed or incomplete tokenizer.json files and
// unsupported components give errors that name the file and the problem. A tiny valid file,
// written beside them, checks both spellings of merges and the added-token flags.
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "coordinator/tokenizer/tokenizer.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using json = nlohmann::json;
using testing::work_path;

// A small valid byte-level BPE tokenizer: "a" "b" -> "ab" (string merge), "ab" "c" -> "abc"
// (pair merge), "Ġ" is the space byte.
json tiny_tokenizer() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false,
                      "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
              "vocab": {"<s>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5, "Ġ": 6},
              "merges": ["a b", ["ab", "c"]]}
  })");
}

std::string write_file(const std::string& name, const std::string& contents) {
  const std::string dir = work_path("tokenizer_errors");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  return path;
}

// Loads `contents` (written to `name`) and expects an error naming the file and each of `parts`.
void expect_error(const std::string& name, const std::string& contents, std::initializer_list<std::string> parts) {
  const std::string path = write_file(name, contents);
  const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_file(path);
  ASSERT_FALSE(tokenizer.ok()) << name << " loaded";
  const std::string message(tokenizer.status().message());
  EXPECT_NE(message.find(path), std::string::npos) << message;
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

TEST(TinyTokenizer, LoadsAndUsesBothMergeSpellings) {
  auto tokenizer = Tokenizer::from_file(write_file("tiny.json", tiny_tokenizer().dump()));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->encode("ab"), (std::vector<int32_t>{4}));
  EXPECT_EQ(tokenizer->encode("abc cab"), (std::vector<int32_t>{5, 6, 3, 4}));
  EXPECT_EQ(tokenizer->encode("<s>abc"), (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{0, 5, 6, 3, 4}), "<s>abc cab");
  EXPECT_EQ(tokenizer->vocab_size(), 7);
}

TEST(TinyTokenizer, AddedTokenFlags) {
  json j = tiny_tokenizer();
  j["added_tokens"].push_back({{"id", 7}, {"content", "<l>"}, {"lstrip", true}, {"special", true}});
  j["added_tokens"].push_back({{"id", 8}, {"content", "<r>"}, {"rstrip", true}, {"special", true}});
  j["added_tokens"].push_back({{"id", 9}, {"content", "ca"}, {"single_word", true}, {"normalized", false}});
  auto tokenizer = Tokenizer::from_file(write_file("tiny_flags.json", j.dump()));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  // lstrip takes the spaces before the token, rstrip those after it.
  EXPECT_EQ(tokenizer->encode("a  <l>b"), (std::vector<int32_t>{1, 7, 2}));
  EXPECT_EQ(tokenizer->encode("a<r>  b"), (std::vector<int32_t>{1, 8, 2}));
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{1, 7, 2}), "a<l>b");
  // single_word: only between non-word characters.
  EXPECT_EQ(tokenizer->encode("b ca"), (std::vector<int32_t>{2, 6, 9}));
  EXPECT_EQ(tokenizer->encode("cab"), (std::vector<int32_t>{3, 4}));
  EXPECT_FALSE(tokenizer->is_special(9));
  // parse_special off leaves "<l>" to the model, which drops bytes it has no token for.
  EXPECT_EQ(tokenizer->encode("a<l>", /*parse_special=*/false), (std::vector<int32_t>{1}));
  EXPECT_EQ(tokenizer->encode("ca", /*parse_special=*/false), (std::vector<int32_t>{9}));
}

TEST(TokenizerErrors, MissingFile) {
  const std::string path = work_path("tokenizer_errors/does_not_exist.json");
  const absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_file(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(tokenizer.status().message()).find(path), std::string::npos);
}

TEST(TokenizerErrors, MalformedJson) {
  std::string text = tiny_tokenizer().dump();
  text.resize(text.size() / 2);
  expect_error("truncated.json", text, {"malformed JSON"});
  expect_error("not_object.json", "[1, 2, 3]", {"top level must be an object"});
  // Found by fuzz/tokenizer_json_fuzzer: a number too large for a double made the parser throw
  // out_of_range, which escaped from_file and terminated the process.
  expect_error("number_overflow.json", "111111111.111111E1111111111111111111w111111111\"", {"malformed JSON"});
  expect_error("number_overflow_field.json", R"({"model": {"type": "BPE", "dropout": 1e400}})",
               {"malformed JSON", "number overflow"});
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  for (const char* type : {"Unigram", "WordPiece", "WordLevel"}) {
    json j = tiny_tokenizer();
    j["model"]["type"] = type;
    expect_error(std::string("model_") + type + ".json", j.dump(), {"model type", type, "not supported"});
  }
}

TEST(TokenizerErrors, MissingOrBadVocab) {
  json j = tiny_tokenizer();
  j["model"].erase("vocab");
  expect_error("no_vocab.json", j.dump(), {"model.vocab is missing"});
  j["model"]["vocab"] = json::array({"a", "b"});
  expect_error("vocab_list.json", j.dump(), {"model.vocab must be an object"});
  j = tiny_tokenizer();
  j["model"]["vocab"]["b"] = "two";
  expect_error("vocab_string_id.json", j.dump(), {"model.vocab[\"b\"]", "integer"});
  j = tiny_tokenizer();
  j["model"]["vocab"]["b"] = 1;
  expect_error("vocab_duplicate_id.json", j.dump(), {"id 1", "\"a\"", "\"b\""});
  j = tiny_tokenizer();
  j.erase("model");
  expect_error("no_model.json", j.dump(), {"\"model\" is missing"});
}

TEST(TokenizerErrors, MergesNamingUnknownTokens) {
  json j = tiny_tokenizer();
  j["model"]["merges"].push_back("a zz");
  expect_error("merge_unknown_side.json", j.dump(), {"model.merges[2]", "\"zz\"", "not in model.vocab"});
  j = tiny_tokenizer();
  j["model"]["merges"].push_back(json::array({"b", "c"}));
  expect_error("merge_unknown_result.json", j.dump(), {"model.merges[2]", "\"bc\"", "not in model.vocab"});
  j = tiny_tokenizer();
  j["model"]["merges"].push_back("a b c");
  expect_error("merge_three_parts.json", j.dump(), {"model.merges[2]", "two tokens"});
  j = tiny_tokenizer();
  j["model"].erase("merges");
  expect_error("no_merges.json", j.dump(), {"model.merges is missing"});
}

TEST(TokenizerErrors, UnsupportedModelOptions) {
  json j = tiny_tokenizer();
  j["model"]["byte_fallback"] = "yes";
  expect_error("byte_fallback.json", j.dump(), {"byte_fallback", "true or false"});
  j = tiny_tokenizer();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_error("subword_prefix.json", j.dump(), {"continuing_subword_prefix", "##"});
  j = tiny_tokenizer();
  j["model"]["dropout"] = 0.1;
  expect_error("dropout.json", j.dump(), {"model.dropout"});
}

TEST(TokenizerErrors, UnsupportedPipelineComponents) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error("pre_whitespace.json", j.dump(), {"pre-tokenizer type \"Whitespace\"", "not supported"});
  j = tiny_tokenizer();
  j["pre_tokenizer"] = 42;
  expect_error("pre_number.json", j.dump(), {"pre_tokenizer must be an object"});
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}},
                                            {"behavior", "Removed"}, {"invert", false}}}}};
  expect_error("split_removed.json", j.dump(), {"Split behavior", "Removed"});
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Isolated";
  expect_error("split_without_byte_level.json", j.dump(), {"no ByteLevel"});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "ByteLevel"}, {"use_regex", false}});
  expect_error("split_bad_regex.json", j.dump(), {"cannot compile", "(unclosed"});
  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error("normalizer_nfkc.json", j.dump(), {"normalizer type \"NFKC\"", "not supported"});
  j = tiny_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error("decoder_wordpiece.json", j.dump(), {"decoder type", "WordPiece"});
}

TEST(TokenizerErrors, BadAddedTokens) {
  json j = tiny_tokenizer();
  j["added_tokens"][0].erase("content");
  expect_error("added_no_content.json", j.dump(), {"added_tokens[0]", "content"});
  j = tiny_tokenizer();
  j["added_tokens"][0]["id"] = -3;
  expect_error("added_negative_id.json", j.dump(), {"added_tokens[0].id", "-3"});
}

TEST(TokenizerErrors, ModelDirNamesUnknownSpecialTokens) {
  const std::string dir = work_path("tokenizer_errors/model_dir");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << tiny_tokenizer().dump();
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": {"content": "<bos>"}})";
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::from_model_dir(dir);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(std::string(tokenizer.status().message()).find("tokenizer_config.json"), std::string::npos);
  EXPECT_NE(std::string(tokenizer.status().message()).find("<bos>"), std::string::npos);

  std::ofstream(dir + "/tokenizer_config.json", std::ios::trunc) << R"({"bos_token": "<s>", "add_bos_token": true})";
  std::ofstream(dir + "/config.json") << R"({"eos_token_id": [5, 99]})";
  tokenizer = Tokenizer::from_model_dir(dir);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(std::string(tokenizer.status().message()).find("config.json"), std::string::npos);
  EXPECT_NE(std::string(tokenizer.status().message()).find("99"), std::string::npos);

  std::ofstream(dir + "/config.json", std::ios::trunc) << R"({"eos_token_id": [5, 4], "bos_token_id": 0})";
  tokenizer = Tokenizer::from_model_dir(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->bos_id(), 0);
  EXPECT_EQ(tokenizer->eos_ids(), std::set<int32_t>({4, 5}));
  EXPECT_TRUE(tokenizer->add_bos());
}

}  // namespace
}  // namespace exl3
