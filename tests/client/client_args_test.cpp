// Tests of exl3-client's flag-to-request conversion (build_generate_request, parse_token_ids) and
// of its printed text (summary line, byte sizes, status names, the shard plan table).
#include <string>
#include <vector>

#include "client/format.h"
#include "client/request_builder.h"
#include "gtest/gtest.h"

namespace exl3::client {
namespace {

TEST(BuildGenerateRequest, PassesEveryFlagOn) {
  GenerateOptions o;
  o.prompt = "Once upon a time";
  o.max_new_tokens = 32;
  o.temperature = 0.0f;
  o.top_k = 40;
  o.top_p = 0.9f;
  o.min_p = 0.05f;
  o.repetition_penalty = 1.1f;
  o.presence_penalty = -0.5f;
  o.frequency_penalty = 0.25f;
  o.seed = 18446744073709551615ull;
  o.stop_strings = {"\n\n", "THE END"};
  o.stop_token_ids = {7, 9};
  o.ignore_eos = true;
  o.no_bos = true;
  o.special_tokens_as_text = true;
  o.skip_special_tokens = true;
  o.request_id = "r1";
  auto r = build_generate_request(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id(), "r1");
  EXPECT_EQ(r->prompt(), "Once upon a time");
  ASSERT_TRUE(r->has_add_bos());
  EXPECT_FALSE(r->add_bos());
  EXPECT_TRUE(r->special_tokens_as_text());
  EXPECT_TRUE(r->skip_special_tokens());
  const auto& s = r->sampling();
  ASSERT_TRUE(s.has_temperature());  // 0 (greedy) is sent, not dropped as "unset"
  EXPECT_EQ(s.temperature(), 0.0f);
  EXPECT_EQ(s.top_k(), 40);
  EXPECT_EQ(s.top_p(), 0.9f);
  EXPECT_EQ(s.min_p(), 0.05f);
  EXPECT_EQ(s.repetition_penalty(), 1.1f);
  EXPECT_EQ(s.presence_penalty(), -0.5f);
  EXPECT_EQ(s.frequency_penalty(), 0.25f);
  EXPECT_EQ(s.seed(), 18446744073709551615ull);
  const auto& stop = r->stopping();
  EXPECT_EQ(stop.max_new_tokens(), 32);
  ASSERT_EQ(stop.stop_strings_size(), 2);
  EXPECT_EQ(stop.stop_strings(0), "\n\n");
  EXPECT_EQ(stop.stop_strings(1), "THE END");
  ASSERT_EQ(stop.stop_token_ids_size(), 2);
  EXPECT_EQ(stop.stop_token_ids(1), 9);
  EXPECT_TRUE(stop.ignore_eos());
}

TEST(BuildGenerateRequest, UnsetFlagsStayUnset) {
  GenerateOptions o;
  o.prompt = "";
  auto r = build_generate_request(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->input_case(), exl3::v1::GenerateRequest::kPrompt);
  EXPECT_FALSE(r->has_add_bos());
  const auto& s = r->sampling();
  EXPECT_FALSE(s.has_temperature() || s.has_top_k() || s.has_top_p() || s.has_min_p() || s.has_repetition_penalty() ||
               s.has_presence_penalty() || s.has_frequency_penalty() || s.has_seed());
  EXPECT_FALSE(r->stopping().has_max_new_tokens());
  EXPECT_FALSE(r->stopping().ignore_eos());
}

TEST(BuildGenerateRequest, TokensInsteadOfPrompt) {
  GenerateOptions o;
  o.tokens = "128000, 9906,1917";
  auto r = build_generate_request(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->input_case(), exl3::v1::GenerateRequest::kPromptTokens);
  EXPECT_EQ(std::vector<int32_t>(r->prompt_tokens().ids().begin(), r->prompt_tokens().ids().end()),
            (std::vector<int32_t>{128000, 9906, 1917}));
}

TEST(BuildGenerateRequest, RefusesBothNeitherAndBadTokens) {
  GenerateOptions both;
  both.prompt = "hi";
  both.tokens = "1";
  EXPECT_EQ(build_generate_request(both).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(build_generate_request(GenerateOptions{}).status().code(), absl::StatusCode::kInvalidArgument);
  GenerateOptions bad;
  bad.tokens = "1,x";
  EXPECT_EQ(build_generate_request(bad).status().code(), absl::StatusCode::kInvalidArgument);
  GenerateOptions empty;
  empty.tokens = " ";
  EXPECT_EQ(build_generate_request(empty).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseTokenIds, AcceptedForms) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(*parse_token_ids("1,2,3"), (V{1, 2, 3}));
  EXPECT_EQ(*parse_token_ids(" 1 2\t3\n"), (V{1, 2, 3}));
  EXPECT_EQ(*parse_token_ids("[1, 2, 3]"), (V{1, 2, 3}));
  EXPECT_EQ(*parse_token_ids("2147483647"), (V{2147483647}));
  EXPECT_EQ(*parse_token_ids("-1"), (V{-1}));
  EXPECT_EQ(*parse_token_ids(""), V{});
  EXPECT_EQ(*parse_token_ids("[]"), V{});
}

TEST(ParseTokenIds, RejectedForms) {
  for (const char* bad : {"1,,2", ",1", "1,", "2147483648", "1.5", "0x10", "[1,2", "a", "1;2"}) {
    auto ids = parse_token_ids(bad);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Format, SummaryLine) {
  GenerateSummary s;
  s.tokens = 128;
  s.total_s = 2.0;
  s.first_token_s = 0.0125;
  s.finish_reason = exl3::v1::FINISH_REASON_LENGTH;
  EXPECT_EQ(format_summary(s),
            "128 tokens in 2.00 s, 64.0 tokens/s, time to first token 12.5 ms, finish reason length");
  EXPECT_EQ(format_summary(GenerateSummary{}),
            "0 tokens in 0.00 s, n/a tokens/s, time to first token n/a, finish reason unspecified");
}

TEST(Format, NamesAndNumbers) {
  EXPECT_EQ(finish_reason_name(exl3::v1::FINISH_REASON_STOP_STRING), "stop_string");
  EXPECT_EQ(status_code_name(grpc::StatusCode::UNAVAILABLE), "UNAVAILABLE");
  EXPECT_EQ(status_code_name(grpc::StatusCode::INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(int64_t{12} << 30), "12.0 GiB");
  EXPECT_EQ(format_bytes(int64_t{300} << 20), "300 MiB");
  const std::vector<int32_t> ids = {1, 22, 333};
  EXPECT_EQ(format_token_ids(ids), "1,22,333");
}

TEST(Format, ModelInfoHasOneRowPerRank) {
  exl3::v1::ModelInfoResponse info;
  info.set_architecture("LlamaForCausalLM");
  info.set_num_layers(16);
  info.set_split_mode("layers");
  info.set_bos_token_id(128000);
  info.add_eos_token_ids(128001);
  info.add_eos_token_ids(128009);
  for (int r = 0; r < 2; ++r) {
    exl3::v1::RankShard* s = info.add_shards();
    s->set_rank(r);
    s->set_device(r == 0 ? "cpu" : "cuda:1 NVIDIA H200");
    s->set_first_layer(8 * r);
    s->set_end_layer(8 * r + 8);
    s->set_weight_bytes(int64_t{1} << 30);
    s->set_cache_bytes(int64_t{256} << 20);
  }
  const std::string text = format_model_info(info);
  EXPECT_NE(text.find("eos token ids     128001,128009\n"), std::string::npos) << text;
  EXPECT_NE(text.find("shard plan (2 ranks):\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rank   device              layers   attn heads"), std::string::npos) << text;
  EXPECT_NE(text.find("1      cuda:1 NVIDIA H200  [8, 16)"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos) << text;
  EXPECT_NE(text.find("2.00 GiB"), std::string::npos) << text;
}

}  // namespace
}  // namespace exl3::client
