// Banned strings (SamplingParams.banned_strings) through the public API of a launched CPU cluster:
// two ranks split by layers, 16-token pages, 3 decode iterations per worker command (so matches
// land in the middle of multi-token steps) and prefix reuse on (so rewinds meet indexed pages).
//  - Greedy generation is run once without bans; a word of its output is banned (upper-cased, to
//    exercise case-insensitivity): the new output never contains it in any case, everything before
//    the token where it began is identical, and that token is replaced.
//  - Streaming is consistent with the final result: the streamed tokens and text are the unary
//    call's, and after every message the text streamed so far is exactly the text of the tokens
//    streamed so far (a token is only streamed with its complete text, and never retracted).
//  - Four requests sharing the prompt, two with bans, run concurrently: each gets the output it
//    gets alone.
//  - A request that finishes (LENGTH) in the very step where the banned word completes cannot
//    rewind: its text ends before the word and the token where the word began is not returned.
//  - Banning every letter, digit and the space runs into the rewind limit: the request ends with
//    STOP_STRING and text that holds none of them.
//  - Empty or too many banned strings are refused with INVALID_ARGUMENT.
//  - At the end no request runs and every KV page is free or cached (no leak).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

const std::string kPrompt = "Once upon a time, in a land far away, there lived a";

std::string lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
  return s;
}

std::vector<int32_t> tokens_of(const v1::GenerateResponse& r) { return {r.token_ids().begin(), r.token_ids().end()}; }

// Three bytes of `text` that first occur (ASCII-case-insensitively) at or after byte `from`, holding
// a letter and only ASCII letters and digits; failing that, three ASCII bytes not all spaces.
std::optional<std::string> pick_word(const std::string& text, size_t from) {
  auto ascii = [](char c) { return static_cast<unsigned char>(c) < 0x80; };
  for (const bool strict : {true, false}) {
    for (size_t i = from; i + 3 <= text.size(); ++i) {
      const std::string w = text.substr(i, 3);
      const bool ok = strict ? std::all_of(w.begin(), w.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }) &&
                                   std::any_of(w.begin(), w.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); })
                             : std::all_of(w.begin(), w.end(), ascii) && w != "   ";
      if (ok && lower(text).find(lower(w)) >= from) return w;
    }
  }
  return std::nullopt;
}

class BannedStrings : public ApiSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.mode = "layers";
    config.max_seq_len = 512;
    config.max_batch = 4;
    config.log_name = "banned_strings";
    config.extra_args = {"--page-size", "16", "--decode-steps", "3", "--prefix-cache"};
    start_server(config);
  }

  grpc::Status unary(const v1::GenerateRequest& request, v1::GenerateResponse* response) {
    return generate_unary(*stub_, request, response, seconds(120));
  }

  std::string detok(const std::vector<int32_t>& ids) {
    std::string text;
    const grpc::Status status = detokenize(*stub_, ids, &text);
    EXPECT_TRUE(status.ok()) << describe(status);
    return text;
  }

  // The streamed messages of `request` are consistent with each other and with `expected`.
  void expect_consistent_stream(const v1::GenerateRequest& request, const v1::GenerateResponse& expected) {
    std::vector<int32_t> tokens;
    std::string text;
    int checked = 0;
    const StreamResult streamed = stream_generate(*stub_, request, seconds(120), [&](const v1::GenerateResponse& m) {
      tokens.insert(tokens.end(), m.token_ids().begin(), m.token_ids().end());
      text += m.text();
      if (m.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) {
        EXPECT_EQ(detok(tokens), text) << "after " << tokens.size() << " streamed tokens";
        ++checked;
      }
    });
    ASSERT_TRUE(streamed.status.ok()) << describe(streamed.status);
    EXPECT_EQ(streamed.tokens, tokens_of(expected));
    EXPECT_EQ(streamed.text, expected.text());
    EXPECT_EQ(streamed.finish_reason, expected.finish_reason());
    EXPECT_EQ(streamed.early_final_fields, 0);
    EXPECT_EQ(streamed.usage.completion_tokens(), static_cast<int32_t>(streamed.tokens.size()));
    EXPECT_TRUE(checked > 0 || expected.token_ids_size() == 0);
  }

  void expect_no_leak() {
    v1::StatsResponse s;
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(stats(*stub_, &s).ok());
      if (s.running_requests() == 0 && s.queued_requests() == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(s.running_requests(), 0);
    EXPECT_EQ(s.queued_requests(), 0);
    EXPECT_EQ(s.free_kv_pages(), s.total_kv_pages()) << "pages leaked (free counts cached ones)";
    EXPECT_EQ(s.shared_kv_pages(), 0);
  }
};

TEST_F(BannedStrings, GreedyOutputAvoidsABannedWordOfItsOwn) {
  v1::GenerateRequest request = greedy(text_request(kPrompt, 48));
  request.mutable_stopping()->set_ignore_eos(true);
  v1::GenerateResponse plain;
  ASSERT_TRUE(unary(request, &plain).ok());
  ASSERT_EQ(plain.token_ids_size(), 48);
  const std::string& text = plain.text();
  const std::optional<std::string> word = pick_word(text, text.size() / 4);
  ASSERT_TRUE(word.has_value()) << "no word to ban in \"" << text << "\"";
  const size_t at = lower(text).find(lower(*word));
  ASSERT_NE(at, std::string::npos);
  // The token where the first occurrence begins: the first whose text reaches past `at`.
  const std::vector<int32_t> all = tokens_of(plain);
  size_t begin = 0;
  while (begin < all.size() && detok(std::vector<int32_t>(all.begin(), all.begin() + begin + 1)).size() <= at) ++begin;
  ASSERT_LT(begin, all.size());
  const std::vector<int32_t> kept(all.begin(), all.begin() + begin);
  const std::string kept_text = detok(kept);

  request.mutable_sampling()->add_banned_strings(upper(*word));
  v1::GenerateResponse banned;
  const grpc::Status status = unary(request, &banned);
  ASSERT_TRUE(status.ok()) << describe(status);
  std::printf("banned \"%s\" (first at byte %zu, token %zu of the plain output)\nplain:  \"%s\"\nbanned: \"%s\" (%s)\n",
              upper(*word).c_str(), at, begin, text.c_str(), banned.text().c_str(),
              v1::FinishReason_Name(banned.finish_reason()).c_str());
  EXPECT_EQ(lower(banned.text()).find(lower(*word)), std::string::npos) << "the banned word is in the output";
  const std::vector<int32_t> out = tokens_of(banned);
  ASSERT_GE(out.size(), kept.size());
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), out.begin())) << "the tokens before the rewind point changed";
  EXPECT_EQ(banned.text().substr(0, kept_text.size()), kept_text) << "the text before the rewind point changed";
  if (banned.finish_reason() == v1::FINISH_REASON_LENGTH) {
    EXPECT_EQ(out.size(), 48u);
    EXPECT_NE(out[begin], all[begin]) << "the token where the banned word began was sampled again there";
    EXPECT_EQ(detok(out), banned.text());
  } else {
    EXPECT_EQ(banned.finish_reason(), v1::FINISH_REASON_STOP_STRING) << "only the rewind limit ends it early";
  }

  // Case-insensitive on both sides: the word as it appeared bans the same way.
  v1::GenerateRequest same_word = request;
  same_word.mutable_sampling()->set_banned_strings(0, lower(*word));
  v1::GenerateResponse again;
  ASSERT_TRUE(unary(same_word, &again).ok());
  EXPECT_EQ(tokens_of(again), out);
  EXPECT_EQ(again.text(), banned.text());

  expect_consistent_stream(request, banned);

  // A sequence that finished in the step where the word completes cannot rewind: it ends with its
  // own reason (LENGTH here), the text cut before the word, without the token where it began.
  size_t end = begin;
  while (end < all.size() &&
         lower(detok(std::vector<int32_t>(all.begin(), all.begin() + end + 1))).find(lower(*word)) == std::string::npos) {
    ++end;
  }
  ASSERT_LT(end, all.size());
  v1::GenerateRequest short_request = request;
  short_request.mutable_stopping()->set_max_new_tokens(static_cast<int32_t>(end + 1));
  v1::GenerateResponse cut;
  ASSERT_TRUE(unary(short_request, &cut).ok());
  EXPECT_EQ(cut.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(cut.text(), text.substr(0, at));
  EXPECT_EQ(tokens_of(cut), kept);
  EXPECT_EQ(cut.usage().completion_tokens(), static_cast<int32_t>(kept.size()));
  expect_no_leak();
}

TEST_F(BannedStrings, ConcurrentRequestsSharingThePromptGetTheirOwnOutputs) {
  v1::GenerateRequest base = greedy(text_request(kPrompt + " king who", 40));
  base.mutable_stopping()->set_ignore_eos(true);
  v1::GenerateResponse plain;
  ASSERT_TRUE(unary(base, &plain).ok());
  const std::optional<std::string> word = pick_word(plain.text(), plain.text().size() / 3);
  ASSERT_TRUE(word.has_value()) << plain.text();
  v1::GenerateRequest with_ban = base;
  with_ban.mutable_sampling()->add_banned_strings(*word);
  v1::GenerateResponse alone;
  ASSERT_TRUE(unary(with_ban, &alone).ok());
  EXPECT_EQ(lower(alone.text()).find(lower(*word)), std::string::npos);

  std::vector<std::future<std::pair<grpc::Status, v1::GenerateResponse>>> calls;
  for (int i = 0; i < 4; ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      v1::GenerateResponse r;
      grpc::ClientContext context;
      set_timeout(context, seconds(120));
      grpc::Status s = stub_->GenerateUnary(&context, i % 2 == 0 ? base : with_ban, &r);
      return std::make_pair(s, r);
    }));
  }
  for (int i = 0; i < 4; ++i) {
    auto [status, r] = calls[i].get();
    ASSERT_TRUE(status.ok()) << "request " << i << ": " << describe(status);
    const v1::GenerateResponse& expected = i % 2 == 0 ? plain : alone;
    EXPECT_EQ(tokens_of(r), tokens_of(expected)) << "request " << i;
    EXPECT_EQ(r.text(), expected.text()) << "request " << i;
  }
  expect_no_leak();
}

TEST_F(BannedStrings, TheRewindLimitEndsTheRequestAtTheBannedString) {
  v1::GenerateRequest request = greedy(text_request(kPrompt, 64));
  request.mutable_stopping()->set_ignore_eos(true);
  std::vector<std::string> banned = {" "};
  for (char c = 'a'; c <= 'z'; ++c) banned.push_back(std::string(1, c));
  for (char c = '0'; c <= '9'; ++c) banned.push_back(std::string(1, c));
  for (const std::string& b : banned) request.mutable_sampling()->add_banned_strings(b);
  v1::GenerateResponse r;
  const grpc::Status status = unary(request, &r);
  ASSERT_TRUE(status.ok()) << describe(status);
  std::printf("everything alphanumeric banned: %d tokens, \"%s\" (%s)\n", r.token_ids_size(), r.text().c_str(),
              v1::FinishReason_Name(r.finish_reason()).c_str());
  EXPECT_EQ(r.finish_reason(), v1::FINISH_REASON_STOP_STRING) << "256 rewinds were not reached";
  EXPECT_LT(r.token_ids_size(), 64);
  for (const std::string& b : banned) EXPECT_EQ(lower(r.text()).find(b), std::string::npos) << "\"" << b << "\"";
  // The text ends before the banned string; the token where it began is not returned.
  const std::string tokens_text = detok(tokens_of(r));
  EXPECT_EQ(r.text().substr(0, tokens_text.size()), tokens_text);
  expect_no_leak();
}

TEST_F(BannedStrings, EmptyOrTooManyAreRefused) {
  v1::GenerateRequest empty = text_request("Hello", 4);
  empty.mutable_sampling()->add_banned_strings("dragon");
  empty.mutable_sampling()->add_banned_strings("");
  v1::GenerateResponse response;
  grpc::Status status = unary(empty, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(status);
  EXPECT_NE(status.error_message().find("sampling.banned_strings[1]"), std::string::npos) << status.error_message();
  v1::GenerateRequest many = text_request("Hello", 4);
  for (int i = 0; i < 65; ++i) many.mutable_sampling()->add_banned_strings(std::to_string(1000 + i));
  status = unary(many, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << describe(status);
  EXPECT_NE(status.error_message().find("--max-banned-strings"), std::string::npos) << status.error_message();
}

}  // namespace
}  // namespace exl3::testing
