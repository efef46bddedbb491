// tokenizer.json / tokenizer_config.json for synthetic models (see synthetic_tokenizer.h).
#include "bench/synthetic_tokenizer.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/byte_level.h"
#include "kernels/check.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using json = nlohmann::json;

json added_token(int32_t id, const std::string& content) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

absl::Status write_json(const std::string& path, const json& j) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace

absl::Status write_synthetic_tokenizer(const std::string& dir, const ModelShape& shape) {
  json vocab = json::object();
  int32_t id = 0;
  for (int b = 0; b < 256; ++b, ++id) {
    while (id == shape.bos_token_id || id == shape.eos_token_id) ++id;
    vocab[std::string(byte_level::char_of(static_cast<uint8_t>(b)))] = id;
  }
  json added = json::array({added_token(shape.bos_token_id, shape.bos_token)});
  if (shape.eos_token_id != shape.bos_token_id) added.push_back(added_token(shape.eos_token_id, shape.eos_token));

  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", shape.bos_token}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", shape.bos_token}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", shape.bos_token}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{shape.bos_token,
           {{"id", shape.bos_token}, {"ids", json::array({shape.bos_token_id})}, {"tokens", json::array({shape.bos_token})}}}}}}},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", json::array()}}},
  };
  json added_decoder = json::object();
  for (const json& t : added) {
    added_decoder[std::to_string(t["id"].get<int32_t>())] = {{"content", t["content"]}, {"lstrip", false},
                                                             {"normalized", false},     {"rstrip", false},
                                                             {"single_word", false},    {"special", true}};
  }
  const json tokenizer_config = {
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"added_tokens_decoder", added_decoder},
      {"bos_token", shape.bos_token},
      {"eos_token", shape.eos_token},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", shape.max_position_embeddings},
      {"tokenizer_class", "PreTrainedTokenizerFast"},
  };
  const json special_tokens_map = {{"bos_token", shape.bos_token}, {"eos_token", shape.eos_token}};
  EXL3_RETURN_IF_ERROR(write_json(dir + "/tokenizer.json", tokenizer));
  EXL3_RETURN_IF_ERROR(write_json(dir + "/tokenizer_config.json", tokenizer_config));
  return write_json(dir + "/special_tokens_map.json", special_tokens_map);
}

}  // namespace exl3
