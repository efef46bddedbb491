// The table of GGUF pre-tokenizer names (see pre_tokenizer_table.h). The regexes are the ones
// llama.cpp's vocabulary code uses for each name (and the published tokenizer.json files of those
// models use): facts of the formats, spelled as Hugging Face spells them. GPT-2's own split is
// ByteLevel's use_regex; "default" follows Hugging Face (GPT-2), not llama.cpp's fallback split.
#include "import/pre_tokenizer_table.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"

namespace exl3 {
namespace {

using json = nlohmann::json;

// Llama 3 (tiktoken cl100k-style, digits in groups of up to three).
constexpr const char* kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen 2 (as Llama 3, single digits).
constexpr const char* kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Every digit alone (Hugging Face's Digits(individual_digits=true)), before GPT-2's split.
constexpr const char* kDigit = "\\p{N}";

enum class Kind { kGpt2, kDigitsThenGpt2, kLlama3, kQwen2 };

const std::map<std::string, Kind>& table() {
  static const std::map<std::string, Kind> t = {
      {"default", Kind::kGpt2},          {"gpt-2", Kind::kGpt2},          {"gpt2", Kind::kGpt2},
      {"olmo", Kind::kGpt2},             {"stablelm2", Kind::kGpt2},      {"poro-chat", Kind::kGpt2},
      {"smollm", Kind::kDigitsThenGpt2}, {"starcoder", Kind::kDigitsThenGpt2},
      {"refact", Kind::kDigitsThenGpt2}, {"codeshell", Kind::kDigitsThenGpt2},
      {"llama-bpe", Kind::kLlama3},      {"llama3", Kind::kLlama3},       {"llama-v3", Kind::kLlama3},
      {"smaug-bpe", Kind::kLlama3},      {"dbrx", Kind::kLlama3},         {"falcon3", Kind::kLlama3},
      {"qwen2", Kind::kQwen2},           {"deepseek-r1-qwen", Kind::kQwen2}, {"megrez", Kind::kQwen2},
  };
  return t;
}

json split(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

}  // namespace

absl::StatusOr<ByteLevelPreTokenizer> byte_level_pre_tokenizer(const std::string& pre_name) {
  const auto it = table().find(pre_name);
  if (it == table().end()) {
    return absl::UnimplementedError(absl::StrCat("tokenizer.ggml.pre \"", pre_name,
                                                 "\" is not a pre-tokenizer exl3-import knows (known: ",
                                                 absl::StrJoin(known_pre_tokenizer_names(), ", "), ")"));
  }
  ByteLevelPreTokenizer p;
  switch (it->second) {
    case Kind::kGpt2:
      p.pre_tokenizer = byte_level(true);
      break;
    case Kind::kDigitsThenGpt2:
      p.pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", json::array({split(kDigit), byte_level(true)})}};
      break;
    case Kind::kLlama3:
      p.pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", json::array({split(kLlama3), byte_level(false)})}};
      p.ignore_merges = true;
      break;
    case Kind::kQwen2:
      p.pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", json::array({split(kQwen2), byte_level(false)})}};
      break;
  }
  return p;
}

std::vector<std::string> known_pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const auto& [name, kind] : table()) names.push_back(name);
  return names;
}

}  // namespace exl3
