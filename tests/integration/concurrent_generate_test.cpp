// Continuous batching end to end: one exl3-launch with 2 CPU workers (tensor parallel) serves 16
// streaming Generate calls started together from 16 threads, each with its own settings (greedy,
// seeded sampling with top_k / top_p / min_p / penalties, max_new_tokens 8..40, stop strings, a
// text prompt and the same prompt as token ids). Every call must finish with a finish reason and
// usage; Stats must show steps that ran more than one sequence; and every call run again alone
// afterwards must give exactly the same tokens, since greedy decoding and the seeded counter-based
// sampler may not depend on what else shares the batch.
#include <algorithm>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/server_suite.h"

namespace exl3::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kCallTimeout = seconds(60);

// One of the 16 concurrent calls and what the checks expect of it.
struct Case {
  std::string name;
  v1::GenerateRequest request;
  int expected_prompt_tokens = 0;
};

class ConcurrentGenerate : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.mode = "tp";
    config.max_seq_len = 512;
    config.max_batch = 16;
    config.log_name = "concurrent_generate";
    start_server(config);
  }
};

v1::GenerateRequest sampled(v1::GenerateRequest r, float temperature, uint64_t seed) {
  r.mutable_sampling()->set_temperature(temperature);
  r.mutable_sampling()->set_seed(seed);
  return r;
}

// The 16 calls. Each is greedy or seeded, so each can be replayed alone with the same result.
std::vector<Case> make_cases(v1::Inference::Stub& stub) {
  const std::string shared_prompt = "The quick brown fox jumps over the lazy dog and";
  std::vector<int32_t> shared_ids;
  EXPECT_TRUE(tokenize(stub, shared_prompt, &shared_ids).ok());
  auto prompt_len = [&](const std::string& text) {
    std::vector<int32_t> ids;
    EXPECT_TRUE(tokenize(stub, text, &ids).ok());
    return static_cast<int>(ids.size());
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, v1::GenerateRequest r) {
    const int len =
        r.input_case() == v1::GenerateRequest::kPrompt ? prompt_len(r.prompt()) : r.prompt_tokens().ids_size();
    r.set_request_id(name);
    cases.push_back({std::move(name), std::move(r), len});
  };

  // Greedy. "greedy-40" ignores EOS so that it surely streams 40 tokens.
  v1::GenerateRequest long_one = greedy(text_request("Once upon a time there was a", 40));
  long_one.mutable_stopping()->set_ignore_eos(true);
  add("greedy-40", long_one);
  add("greedy-text", greedy(text_request(shared_prompt, 24)));
  add("greedy-tokens", greedy(token_request(shared_ids, 24)));
  add("greedy-8", greedy(text_request("In the beginning", 8)));
  v1::GenerateRequest rep = greedy(text_request("She opened the door and saw", 32));
  rep.mutable_sampling()->set_repetition_penalty(1.3f);
  add("greedy-repetition", rep);
  // The prompt of "greedy-40": its output is greedy-40's cut before the first "." or newline.
  v1::GenerateRequest greedy_stop = greedy(text_request("Once upon a time there was a", 40));
  greedy_stop.mutable_stopping()->add_stop_strings(".");
  greedy_stop.mutable_stopping()->add_stop_strings("\n");
  add("greedy-stop", greedy_stop);

  // Seeded sampling with every sampler setting.
  v1::GenerateRequest r = sampled(text_request("The weather today is", 16), 0.8f, 11);
  r.mutable_sampling()->set_top_k(40);
  add("topk", r);
  r = sampled(text_request("My favourite food is", 20), 1.0f, 12);
  r.mutable_sampling()->set_top_p(0.9f);
  add("topp", r);
  r = sampled(text_request("When the sun goes down", 28), 0.7f, 13);
  r.mutable_sampling()->set_min_p(0.05f);
  add("minp", r);
  r = sampled(text_request("He said that", 36), 1.2f, 14);
  r.mutable_sampling()->set_top_k(100);
  r.mutable_sampling()->set_top_p(0.95f);
  r.mutable_sampling()->set_min_p(0.02f);
  r.mutable_sampling()->set_presence_penalty(0.5f);
  add("mixed-presence", r);
  r = sampled(text_request("The little girl", 40), 0.9f, 15);
  r.mutable_sampling()->set_frequency_penalty(0.7f);
  r.mutable_sampling()->set_repetition_penalty(1.1f);
  add("frequency-repetition", r);
  r = sampled(text_request("Yesterday I went to the", 40), 1.0f, 16);
  r.mutable_stopping()->add_stop_strings("e");
  add("sampled-stop-e", r);
  r = sampled(text_request("There was once a king who", 30), 0.6f, 17);
  r.mutable_sampling()->set_top_k(10);
  r.mutable_stopping()->add_stop_strings(" the");
  r.mutable_stopping()->add_stop_strings("never-produced-stop-string");
  add("sampled-stop-the", r);
  add("default-sampler", sampled(text_request("Tom and his dog", 12), 1.0f, 18));
  r = sampled(token_request(shared_ids, 18), 1.5f, 19);
  r.mutable_sampling()->set_top_p(0.8f);
  r.mutable_sampling()->set_presence_penalty(-0.5f);
  r.mutable_sampling()->set_frequency_penalty(-0.3f);
  add("tokens-negative-penalties", r);
  r = sampled(token_request(shared_ids, 10), 0.3f, 20);
  r.mutable_sampling()->set_top_k(5);
  add("tokens-cold", r);
  return cases;
}

// What every finished call must satisfy, whatever else ran beside it.
void check_finished(const Case& c, const StreamResult& r) {
  SCOPED_TRACE(c.name);
  ASSERT_TRUE(r.status.ok()) << describe(r.status);
  EXPECT_EQ(r.request_id, c.name);
  EXPECT_NE(r.finish_reason, v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_EQ(r.early_final_fields, 0) << "finish_reason/usage must come on the last message only";
  ASSERT_TRUE(r.has_usage);
  EXPECT_EQ(r.usage.prompt_tokens(), c.expected_prompt_tokens);
  EXPECT_EQ(r.usage.completion_tokens(), static_cast<int>(r.tokens.size()));
  EXPECT_GT(r.usage.total_time_s(), 0.0);
  EXPECT_GE(r.usage.total_time_s(), r.usage.time_to_first_token_s());
  const int max_new = c.request.stopping().max_new_tokens();
  ASSERT_GE(r.tokens.size(), 1u);
  EXPECT_LE(static_cast<int>(r.tokens.size()), max_new);
  switch (r.finish_reason) {
    case v1::FINISH_REASON_LENGTH:
      EXPECT_EQ(static_cast<int>(r.tokens.size()), max_new);
      break;
    case v1::FINISH_REASON_EOS:
      EXPECT_FALSE(c.request.stopping().ignore_eos());
      EXPECT_EQ(r.tokens.back(), 1) << "EOS of the fixture model is token 1";
      break;
    case v1::FINISH_REASON_STOP_STRING:
      EXPECT_GT(c.request.stopping().stop_strings_size(), 0);
      break;
    default:
      ADD_FAILURE() << "unexpected finish reason " << v1::FinishReason_Name(r.finish_reason);
  }
  // Output stops at the first match and the match itself is not returned.
  for (const std::string& stop : c.request.stopping().stop_strings()) {
    EXPECT_EQ(r.text.find(stop), std::string::npos) << "text contains stop string \"" << stop << "\": " << r.text;
  }
}

TEST_F(ConcurrentGenerate, SixteenStreamsBatchTogetherAndMatchSequentialRuns) {
  std::unique_ptr<v1::Inference::Stub> stub = server().stub();
  const std::vector<Case> cases = make_cases(*stub);
  ASSERT_EQ(cases.size(), 16u);
  v1::StatsResponse before;
  ASSERT_TRUE(stats(*stub, &before).ok());

  // All 16 threads issue their call at the same moment so the scheduler sees them together.
  std::vector<StreamResult> concurrent(cases.size());
  std::latch go(static_cast<std::ptrdiff_t>(cases.size()));
  const auto concurrent_start = TestClock::now();
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < cases.size(); ++i) {
      threads.emplace_back([&, i] {
        std::unique_ptr<v1::Inference::Stub> own = server().stub();
        go.arrive_and_wait();
        concurrent[i] = stream_generate(*own, cases[i].request, kCallTimeout);
      });
    }
  }
  const auto concurrent_end = TestClock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    check_finished(cases[i], concurrent[i]);
    std::printf("[call] %-26s %2zu tokens in %2d messages, %s, %.2f s: %s\n", cases[i].name.c_str(),
                concurrent[i].tokens.size(), concurrent[i].messages,
                v1::FinishReason_Name(concurrent[i].finish_reason).c_str(), concurrent[i].usage.total_time_s(),
                absl::CEscape(concurrent[i].text).c_str());
  }
  ASSERT_FALSE(HasFailure());

  v1::StatsResponse after;
  ASSERT_TRUE(stats(*stub, &after).ok());
  EXPECT_EQ(after.completed_requests() - before.completed_requests(), 16);
  EXPECT_EQ(after.running_requests(), 0);
  EXPECT_EQ(after.queued_requests(), 0);
  EXPECT_GT(after.largest_batch(), 1);
  int64_t batched_steps = 0;
  for (int b = 2; b < after.batch_size_counts_size(); ++b) batched_steps += after.batch_size_counts(b);
  EXPECT_GT(batched_steps, 0) << "no step ran more than one sequence";
  std::printf("[stats] steps %lld, largest batch %lld, steps with >1 sequence %lld\n",
              static_cast<long long>(after.steps()), static_cast<long long>(after.largest_batch()),
              static_cast<long long>(batched_steps));

  auto result_of = [&](const std::string& name) -> const StreamResult& {
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].name == name) return concurrent[i];
    }
    ADD_FAILURE() << "no case " << name;
    return concurrent[0];
  };
  // Streaming streams: the 40-token call arrives in more than one message.
  EXPECT_EQ(result_of("greedy-40").tokens.size(), 40u);
  EXPECT_GT(result_of("greedy-40").messages, 1);
  // The text prompt and the same prompt as token ids are the same greedy computation.
  EXPECT_EQ(result_of("greedy-text").tokens, result_of("greedy-tokens").tokens);
  // A stop string cuts the text just before the first match; the tokens sampled up to then are
  // the unstopped greedy run's.
  {
    const StreamResult& full = result_of("greedy-40");
    const StreamResult& stopped = result_of("greedy-stop");
    EXPECT_EQ(stopped.finish_reason, v1::FINISH_REASON_STOP_STRING) << "greedy-40 gave: " << full.text;
    const size_t cut = std::min(full.text.find('.'), full.text.find('\n'));
    ASSERT_NE(cut, std::string::npos) << full.text;
    EXPECT_EQ(stopped.text, full.text.substr(0, cut));
    ASSERT_LE(stopped.tokens.size(), full.tokens.size());
    EXPECT_TRUE(std::equal(stopped.tokens.begin(), stopped.tokens.end(), full.tokens.begin()));
  }
  // Without stop strings the streamed text is exactly the detokenized tokens.
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].request.stopping().stop_strings_size() > 0) continue;
    std::string text;
    ASSERT_TRUE(detokenize(*stub, concurrent[i].tokens, &text).ok());
    EXPECT_EQ(concurrent[i].text, text) << cases[i].name;
  }

  // Each call again, alone, one after the other.
  const auto sequential_start = TestClock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    const StreamResult alone = stream_generate(*stub, cases[i].request, kCallTimeout);
    check_finished(cases[i], alone);
    EXPECT_EQ(alone.tokens, concurrent[i].tokens) << cases[i].name << ": batched and alone runs differ";
    EXPECT_EQ(alone.text, concurrent[i].text) << cases[i].name;
    EXPECT_EQ(alone.finish_reason, concurrent[i].finish_reason) << cases[i].name;
  }
  std::printf("[timing] 16 concurrent calls %.2f s, the same 16 one by one %.2f s\n",
              std::chrono::duration<double>(concurrent_end - concurrent_start).count(),
              std::chrono::duration<double>(TestClock::now() - sequential_start).count());
  v1::StatsResponse last;
  ASSERT_TRUE(stats(*stub, &last).ok());
  EXPECT_EQ(last.completed_requests() - after.completed_requests(), 16);
}

}  // namespace
}  // namespace exl3::testing
