// The serving loop's step pipeline (exl3-launch --step-pipeline, the default) against one step at a
// time (--no-step-pipeline), through the public API of launched CPU clusters on the fixture model
// (two ranks split by layers). Two pairs of servers, each a pipelined one and its reference
// without the pipeline: 3 decode iterations per worker command, and 1.
//  - Greedy and seeded sampling (several seeds and sampler settings) give exactly the reference's
//    tokens, text and finish reason on each pipelined server.
//  - Stops that land inside a pipelined command, after which the command already sent for the
//    sequence is void: max_new_tokens of 1..8 (not multiples of the 3 iterations), a stop token id
//    taken from the reference output at several depths (the path EOS takes), and stop strings cut
//    from the reference text. Each gives the reference's tokens, text and finish reason, and a
//    request run right after still gives its reference output (the workers' state is intact).
//  - Four concurrent requests with different seeds and prompts each get the output they get alone
//    (on the reference with 3 per command) on the three other servers.
//  - A stream cancelled by its client after a few tokens ends CANCELLED, and later requests still
//    give their reference outputs.
//  - Every server drains and exits 0 on SIGTERM leaving no worker behind.
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/launched_server.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

const std::string kPrompt = "Once upon a time, in a land far away, there lived a";
constexpr int kTokens = 40;

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

class StepPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reference_ = start("pipeline_off3", {"--no-step-pipeline", "--decode-steps", "3"});
    pipelined_ = start("pipeline_on3", {"--step-pipeline", "--decode-steps", "3"});
    reference_single_ = start("pipeline_off1", {"--no-step-pipeline", "--decode-steps", "1"});
    pipelined_single_ = start("pipeline_on1", {"--decode-steps", "1"});  // the default: on
  }

  static std::vector<std::unique_ptr<LaunchedServer>*> servers() {
    return {&reference_, &pipelined_, &reference_single_, &pipelined_single_};
  }

  static void TearDownTestSuite() {
    for (std::unique_ptr<LaunchedServer>* s : servers()) {
      if (!*s) continue;
      const std::vector<pid_t> workers = (*s)->known_workers();
      const std::optional<int> exit = (*s)->stop(seconds(20));
      const bool clean = exit.has_value() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0;
      EXPECT_TRUE(clean) << (exit ? describe_wait_status(*exit) : std::string("still running 20 s after SIGTERM"));
      if (!clean) std::fprintf(stderr, "--- launcher log (tail) ---\n%s\n", (*s)->log_tail().c_str());
      s->reset();
      for (pid_t w : still_present(workers, TestClock::now() + (clean ? seconds(0) : seconds(5)))) {
        ADD_FAILURE() << "worker " << w << " left behind";
      }
    }
  }

  static std::unique_ptr<LaunchedServer> start(const std::string& name, std::vector<std::string> flags) {
    LaunchConfig config;
    config.workers = 2;
    config.mode = "layers";
    config.max_seq_len = 512;
    config.max_batch = 8;
    config.log_name = name;
    config.extra_args = std::move(flags);
    // Int8 activations (auto) apply to matmuls of at most 8 rows only, so a sequence's numbers
    // would depend on what shares its batch: off, so the concurrent test can expect the outputs
    // of requests run alone.
    config.extra_args.insert(config.extra_args.end(), {"--page-size", "16", "--int8-activations", "off"});
    absl::StatusOr<std::unique_ptr<LaunchedServer>> s = LaunchedServer::start(config, seconds(60));
    if (!s.ok()) {
      std::fprintf(stderr, "exl3-launch (%s) did not start: %s\n", name.c_str(),
                   std::string(s.status().message()).c_str());
      return nullptr;
    }
    (*s)->worker_pids(2, TestClock::now() + seconds(10));
    return *std::move(s);
  }

  void SetUp() override {
    for (std::unique_ptr<LaunchedServer>* s : servers()) ASSERT_TRUE(*s != nullptr) << "a server did not start";
  }

  void TearDown() override {
    if (!HasFailure()) return;
    for (std::unique_ptr<LaunchedServer>* s : servers()) {
      if (*s)
        std::fprintf(stderr, "--- launcher log (%s, tail) ---\n%s\n", name(s->get()).c_str(), (*s)->log_tail().c_str());
    }
  }

  static Output run(LaunchedServer& server, const v1::GenerateRequest& request) {
    std::unique_ptr<v1::Inference::Stub> stub = server.stub();
    const StreamResult r = stream_generate(*stub, request, seconds(120));
    EXPECT_TRUE(r.status.ok()) << describe(r.status);
    return Output{r.tokens, r.text, r.finish_reason};
  }

  // Runs `request` on every server and expects the pipelined ones to give the reference's output.
  // Runs `request` on every server; each pipelined one must give its reference's output, and the
  // two pairs the same text and finish reason (after a stop string the tokens streamed with the
  // final text are those of the command that completed it, so only they may differ between 3 and
  // 1 iterations per command). Returns the output of the reference with 3 per command.
  static Output expect_same(const v1::GenerateRequest& request, const std::string& what) {
    const std::pair<LaunchedServer*, LaunchedServer*> pairs[] = {{reference_.get(), pipelined_.get()},
                                                                 {reference_single_.get(), pipelined_single_.get()}};
    std::vector<Output> wants;
    for (const auto& [reference, pipelined] : pairs) {
      const Output want = run(*reference, request);
      const Output got = run(*pipelined, request);
      EXPECT_EQ(got.tokens, want.tokens) << what << ", " << name(pipelined) << ": first difference at token "
                                         << first_difference(got.tokens, want.tokens);
      EXPECT_EQ(got.text, want.text) << what << ", " << name(pipelined);
      EXPECT_EQ(got.finish, want.finish) << what << ", " << name(pipelined);
      wants.push_back(want);
    }
    EXPECT_EQ(wants[0].text, wants[1].text) << what << ": 3 vs 1 iterations per command";
    EXPECT_EQ(wants[0].finish, wants[1].finish) << what << ": 3 vs 1 iterations per command";
    return wants[0];
  }

  static std::string name(const LaunchedServer* s) {
    return s == reference_.get()          ? "no pipeline, 3 per command"
           : s == pipelined_.get()        ? "pipelined, 3 per command"
           : s == reference_single_.get() ? "no pipeline, 1 per command"
                                          : "pipelined, 1 per command";
  }

  static size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return i;
  }

  static v1::GenerateRequest seeded(uint64_t seed, int max_new_tokens, const std::string& prompt = kPrompt) {
    v1::GenerateRequest r = text_request(prompt, max_new_tokens);
    r.mutable_sampling()->set_temperature(0.9f);
    r.mutable_sampling()->set_top_p(0.95f);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_stopping()->set_ignore_eos(true);
    return r;
  }

  static inline std::unique_ptr<LaunchedServer> reference_, pipelined_, reference_single_, pipelined_single_;
};

TEST_F(StepPipeline, GreedyAndSeededOutputsAreTheSame) {
  v1::GenerateRequest g = greedy(text_request(kPrompt, kTokens));
  g.mutable_stopping()->set_ignore_eos(true);
  const Output greedy_out = expect_same(g, "greedy");
  EXPECT_EQ(static_cast<int>(greedy_out.tokens.size()), kTokens);
  for (const uint64_t seed : {1ull, 42ull, 20240601ull})
    expect_same(seeded(seed, kTokens), "seed " + std::to_string(seed));
  v1::GenerateRequest penalised = seeded(7, kTokens);
  penalised.mutable_sampling()->set_repetition_penalty(1.3f);
  penalised.mutable_sampling()->set_top_k(20);
  expect_same(penalised, "seed 7 with penalties");
}

TEST_F(StepPipeline, MaxNewTokensInsideACommand) {
  for (int n = 1; n <= 8; ++n) {
    const Output out = expect_same(seeded(99, n), "max_new_tokens " + std::to_string(n));
    EXPECT_EQ(static_cast<int>(out.tokens.size()), n);
    EXPECT_EQ(out.finish, v1::FINISH_REASON_LENGTH) << "max_new_tokens " << n;
  }
  expect_same(seeded(5, kTokens), "after the short requests");
}

TEST_F(StepPipeline, StopTokenInsideACommand) {
  const Output full = run(*reference_, seeded(3, kTokens));
  ASSERT_EQ(static_cast<int>(full.tokens.size()), kTokens);
  // Stop at the first occurrence of the token at several depths (1..3 into a 3-token command).
  for (const int at : {0, 1, 2, 4, 6, 10, 17}) {
    v1::GenerateRequest r = seeded(3, kTokens);
    r.mutable_stopping()->add_stop_token_ids(full.tokens[at]);
    const Output out = expect_same(r, "stop token at " + std::to_string(at));
    EXPECT_EQ(out.finish, v1::FINISH_REASON_STOP_TOKEN) << "stop token at " << at;
    ASSERT_FALSE(out.tokens.empty());
    EXPECT_EQ(out.tokens.back(), full.tokens[at]);
    EXPECT_LE(out.tokens.size(), static_cast<size_t>(at + 1));
  }
  expect_same(seeded(4, kTokens), "after the stop tokens");
}

TEST_F(StepPipeline, StopStringInsideACommand) {
  v1::GenerateRequest g = greedy(text_request(kPrompt, kTokens));
  g.mutable_stopping()->set_ignore_eos(true);
  const Output full = run(*reference_, g);
  ASSERT_GE(full.text.size(), 12u) << full.text;
  for (const size_t from : {size_t{1}, full.text.size() / 3, full.text.size() / 2, full.text.size() - 4}) {
    v1::GenerateRequest r = g;
    r.mutable_stopping()->add_stop_strings(full.text.substr(from, 3));
    const Output out = expect_same(r, "stop string at byte " + std::to_string(from));
    EXPECT_EQ(out.finish, v1::FINISH_REASON_STOP_STRING) << "stop string at byte " << from;
    EXPECT_LE(out.text.size(), from) << out.text;
  }
  expect_same(g, "after the stop strings");
}

TEST_F(StepPipeline, ConcurrentRequestsGetTheirOwnOutputs) {
  // Prompts no other test sends, so that each server computes them whole: a prompt position taken
  // from the prefix cache and one computed in the prompt's chunk may differ in the last bits on the
  // CPU backend (a GEMM of other rows), which a warm cache would make depend on the order of calls.
  const char* const prompts[] = {"The old lighthouse keeper", "Rain fell over the quiet harbour while",
                                 "In the beginning there was", "She opened the letter and read"};
  std::vector<v1::GenerateRequest> requests;
  for (uint64_t seed = 11; seed < 15; ++seed) {
    requests.push_back(seeded(seed, 16 + static_cast<int>(seed % 4) * 5, prompts[seed - 11]));
  }
  std::vector<Output> want;
  for (const v1::GenerateRequest& r : requests) want.push_back(run(*reference_, r));
  // The other servers have not seen these prompts (the reference now has them cached).
  for (LaunchedServer* s : {pipelined_.get(), reference_single_.get(), pipelined_single_.get()}) {
    std::vector<std::future<Output>> got;
    for (const v1::GenerateRequest& r : requests)
      got.push_back(std::async(std::launch::async, [s, r] { return run(*s, r); }));
    for (size_t i = 0; i < got.size(); ++i) {
      const Output o = got[i].get();
      EXPECT_EQ(o.tokens, want[i].tokens) << name(s) << " request " << i << ": first difference at token "
                                          << first_difference(o.tokens, want[i].tokens);
      EXPECT_EQ(o.finish, want[i].finish) << "request " << i;
    }
  }
}

TEST_F(StepPipeline, CancelMidStream) {
  for (LaunchedServer* s : {pipelined_.get(), pipelined_single_.get()}) {
    std::unique_ptr<v1::Inference::Stub> stub = s->stub();
    grpc::ClientContext context;
    set_timeout(context, std::chrono::milliseconds(120000));
    v1::GenerateRequest r = seeded(8, 400);
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Generate(&context, r);
    v1::GenerateResponse response;
    int tokens = 0;
    while (tokens < 5 && reader->Read(&response)) tokens += response.token_ids_size();
    ASSERT_GE(tokens, 5) << "the stream ended early";
    context.TryCancel();
    while (reader->Read(&response)) {
    }
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << describe(status);
  }
  expect_same(seeded(9, kTokens), "after the cancellations");
}

}  // namespace
}  // namespace exl3::testing
