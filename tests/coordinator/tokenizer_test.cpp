// Tokenizer against golden ids from independent implementations: Hugging Face tokenizers
// (llama3/vectors.jsonl, the fixture's heldout ids) and llama.cpp's tokenizer test cases
// (llama3/llama-bpe.inp/.out); plus special-token parsing and the model directory's BOS/EOS.
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer_testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

using testing::fixture_tokenizer;
using testing::llama3_tokenizer;
using testing::read_text_file;
using testing::source_path;
using testing::work_path;

TEST(Tokenizer, Llama3VectorsEncodeExactlyAndRoundTrip) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  const Tokenizer& tokenizer = *llama3_tokenizer();
  EXL3_REQUIRE_FILE(work_path("llama3/vectors.jsonl"));
  std::istringstream lines(read_text_file(work_path("llama3/vectors.jsonl")));
  std::string line;
  int cases = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string text = record.at("text").get<std::string>();
    const std::vector<int32_t> expected = record.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = tokenizer.encode(text);
    EXPECT_EQ(ids, expected) << "case " << cases << ": " << text.substr(0, 200);
    EXPECT_EQ(tokenizer.decode(ids), text) << "case " << cases;
    ++cases;
  }
  EXPECT_GE(cases, 200);
}

TEST(Tokenizer, Llama3LlamaCppCasesEncodeExactly) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  const Tokenizer& tokenizer = *llama3_tokenizer();
  // llama.cpp's format: inputs separated by "\n__ggml_vocab_test__\n" (also after the last one),
  // expected ids one line per input, space-separated.
  std::vector<std::string> inputs =
      absl::StrSplit(read_text_file(work_path("llama3/llama-bpe.inp")), "\n__ggml_vocab_test__\n");
  ASSERT_FALSE(inputs.empty());
  ASSERT_TRUE(inputs.back().empty());
  inputs.pop_back();
  std::vector<std::string> outputs = absl::StrSplit(read_text_file(work_path("llama3/llama-bpe.out")), '\n');
  ASSERT_GE(outputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> expected;
    for (absl::string_view id : absl::StrSplit(outputs[i], ' ', absl::SkipEmpty())) {
      expected.push_back(std::stoi(std::string(id)));
    }
    const std::vector<int32_t> ids = tokenizer.encode(inputs[i]);
    EXPECT_EQ(ids, expected) << "case " << i << ": \"" << inputs[i] << "\"";
    EXPECT_EQ(tokenizer.decode(ids), inputs[i]) << "case " << i;
  }
  EXPECT_EQ(inputs.size(), 44u);
}

TEST(Tokenizer, FixtureEncodesHeldoutToReferenceIds) {
  ASSERT_TRUE(fixture_tokenizer().ok()) << fixture_tokenizer().status();
  const Tokenizer& tokenizer = *fixture_tokenizer();
  const std::string text = read_text_file(source_path("tests/data/reference/heldout.txt"));
  auto file = SafetensorsFile::open(source_path("tests/data/reference/heldout_ids.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  auto tensor = (*file)->get("ids");
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  ASSERT_EQ(tensor->rank(), 1);
  const int32_t* data = tensor->data<int32_t>();
  const std::vector<int32_t> expected(data, data + tensor->numel());
  ASSERT_EQ(expected.size(), 75850u);

  const std::vector<int32_t> ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), expected.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(ids[i], expected[i]) << "first mismatch at token " << i;
  }
  EXPECT_EQ(tokenizer.decode(ids), text);
}

TEST(Tokenizer, FixtureModelDirGivesBosEos) {
  ASSERT_TRUE(fixture_tokenizer().ok()) << fixture_tokenizer().status();
  const Tokenizer& tokenizer = *fixture_tokenizer();
  EXPECT_EQ(tokenizer.vocab_size(), 4096);
  EXPECT_EQ(tokenizer.bos_id(), 0);
  EXPECT_EQ(tokenizer.eos_ids(), std::set<int32_t>({1}));
  EXPECT_TRUE(tokenizer.add_bos());
  EXPECT_TRUE(tokenizer.is_special(0));
  EXPECT_TRUE(tokenizer.is_special(1));
  EXPECT_FALSE(tokenizer.is_special(2));
  EXPECT_EQ(tokenizer.token_text(0), "<s>");
  EXPECT_EQ(tokenizer.token_id("</s>"), 1);
}

TEST(Tokenizer, Llama3ModelDirWithoutAddBosTokenFollowsPostProcessor) {
  // tokenizer_config.json names the BOS token but has no add_bos_token, and this tokenizer.json's
  // post-processor adds nothing, so Hugging Face would not add BOS either.
  auto tokenizer = Tokenizer::from_model_dir(work_path("llama3"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->bos_id(), 128000);
  EXPECT_EQ(tokenizer->eos_ids(), std::set<int32_t>({128001}));
  EXPECT_FALSE(tokenizer->add_bos());
  EXPECT_EQ(tokenizer->vocab_size(), 128256);
}

TEST(Tokenizer, FromFileKnowsNoBosEos) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  EXPECT_FALSE(llama3_tokenizer()->bos_id().has_value());
  EXPECT_TRUE(llama3_tokenizer()->eos_ids().empty());
  EXPECT_FALSE(llama3_tokenizer()->add_bos());
}

TEST(Tokenizer, SpecialTokenTextIsParsedOnlyWhenAsked) {
  ASSERT_TRUE(fixture_tokenizer().ok()) << fixture_tokenizer().status();
  const Tokenizer& tokenizer = *fixture_tokenizer();
  const std::vector<int32_t> hello = tokenizer.encode("Hello");
  ASSERT_FALSE(hello.empty());

  std::vector<int32_t> expected = {0};
  expected.insert(expected.end(), hello.begin(), hello.end());
  EXPECT_EQ(tokenizer.encode("<s>Hello"), expected);
  EXPECT_EQ(tokenizer.encode("<s>Hello", /*parse_special=*/true), expected);

  const std::vector<int32_t> plain = tokenizer.encode("<s>Hello", /*parse_special=*/false);
  for (int32_t id : plain) EXPECT_FALSE(tokenizer.is_special(id)) << id;
  EXPECT_EQ(tokenizer.decode(plain), "<s>Hello");
  // "<s>" as text splits like any other symbols and letters: "<", "s", ">" then "Hello".
  std::vector<int32_t> pieces;
  for (const char* piece : {"<", "s", ">", "Hello"}) {
    const std::vector<int32_t> ids = tokenizer.encode(piece);
    pieces.insert(pieces.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(plain, pieces);
}

TEST(Tokenizer, DecodeKeepsOrSkipsSpecialTokens) {
  ASSERT_TRUE(fixture_tokenizer().ok()) << fixture_tokenizer().status();
  const Tokenizer& tokenizer = *fixture_tokenizer();
  const std::vector<int32_t> ids = tokenizer.encode("<s>Hello world</s>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 1);
  EXPECT_EQ(tokenizer.decode(ids), "<s>Hello world</s>");
  EXPECT_EQ(tokenizer.decode(ids, /*skip_special=*/true), "Hello world");
}

TEST(Tokenizer, DecodeHasNoSpaceCleanUp) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  const Tokenizer& tokenizer = *llama3_tokenizer();
  // Hugging Face's clean-up would turn " ." into "." and " 's" into "'s".
  for (const char* text : {"Hello , world . It 's", "  two  spaces ", "a\n\n b\t", " leading space"}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
}

TEST(Tokenizer, InvalidUtf8IsEncodedAsBytes) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  const Tokenizer& tokenizer = *llama3_tokenizer();
  const std::string text = "abc\xff\xfe def \xe2\x82 end";
  const std::vector<int32_t> ids = tokenizer.encode(text);
  std::string bytes;
  for (int32_t id : ids) bytes += tokenizer.token_bytes(id);
  EXPECT_EQ(bytes, text);
  EXPECT_EQ(tokenizer.decode(ids), "abc\xEF\xBF\xBD\xEF\xBF\xBD def \xEF\xBF\xBD end");
}

TEST(Tokenizer, UnknownIdsAreSkippedInDecode) {
  ASSERT_TRUE(fixture_tokenizer().ok()) << fixture_tokenizer().status();
  const Tokenizer& tokenizer = *fixture_tokenizer();
  std::vector<int32_t> ids = tokenizer.encode("Hi");
  ids.insert(ids.begin() + 1, {-1, 4096, 1 << 30});
  EXPECT_EQ(tokenizer.decode(ids), "Hi");
  EXPECT_FALSE(tokenizer.has_token(4096));
  EXPECT_FALSE(tokenizer.token_text(-1).has_value());
  EXPECT_TRUE(tokenizer.token_bytes(4096).empty());
}

TEST(Tokenizer, EmptyTextHasNoIds) {
  ASSERT_TRUE(llama3_tokenizer().ok()) << llama3_tokenizer().status();
  EXPECT_TRUE(llama3_tokenizer()->encode("").empty());
  EXPECT_EQ(llama3_tokenizer()->decode({}), "");
}

}  // namespace
}  // namespace exl3
