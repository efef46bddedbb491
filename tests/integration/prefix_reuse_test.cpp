// Prefix reuse end to end on CPU workers: 16 greedy requests sharing a 1,500-token system prompt
// (then 12 tokens of their own), started together, served by exl3-launch over 2 tensor-parallel
// workers and over 2 layer-split workers, each once with --no-prefix-cache and once with the prefix
// cache on. With the cache the outputs must be the same tokens, the prompt tokens computed (Stats)
// must drop by at least 90%, the mean time to first token (Usage) must drop (both printed), Stats
// must report the hit rate and shared pages while the requests run, and at the end every page must
// be free or cached (no leak).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/launched_server.h"

namespace exl3::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kRequests = 16;
constexpr int kSystemTokens = 1500;
constexpr int kOwnTokens = 12;
constexpr int kNewTokens = 8;

// Deterministic token ids in [3, 4096) (the fixture's vocabulary: 0 BOS, 1 EOS).
std::vector<int32_t> token_run(uint64_t seed, int count) {
  std::vector<int32_t> ids;
  uint64_t x = seed;
  for (int i = 0; i < count; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(static_cast<int32_t>(3 + (x >> 33) % 4093));
  }
  return ids;
}

std::vector<std::vector<int32_t>> prompts() {
  const std::vector<int32_t> system = token_run(1234, kSystemTokens);
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < kRequests; ++r) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> own = token_run(100 + r, kOwnTokens);
    p.insert(p.end(), own.begin(), own.end());
    out.push_back(std::move(p));
  }
  return out;
}

struct RunResult {
  bool ok = false;
  std::vector<std::vector<int32_t>> outputs;
  std::vector<double> ttft_s;
  v1::StatsResponse stats;       // after every request finished
  int64_t most_shared_pages = 0;  // seen by Stats while the requests ran
  double most_hit_rate = 0.0;
  double wall_s = 0.0;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

RunResult serve(const std::string& mode, const std::vector<std::string>& cache_flags) {
  RunResult result;
  LaunchConfig config;
  config.workers = 2;
  config.mode = mode;
  config.max_seq_len = 1600;
  config.max_batch = kRequests;
  config.log_name = "prefix_reuse-" + mode + (cache_flags.empty() ? "" : "-" + cache_flags[0].substr(2));
  config.extra_args = cache_flags;
  absl::StatusOr<std::unique_ptr<LaunchedServer>> started = LaunchedServer::start(config, seconds(60));
  EXPECT_TRUE(started.ok()) << started.status();
  if (!started.ok()) return result;
  LaunchedServer& server = **started;

  const std::vector<std::vector<int32_t>> ps = prompts();
  result.outputs.resize(kRequests);
  result.ttft_s.resize(kRequests);
  std::vector<StreamResult> streams(kRequests);
  std::latch go(kRequests + 1);
  std::atomic<bool> done{false};
  const auto t0 = CallClock::now();
  std::thread poller([&] {
    std::unique_ptr<v1::Inference::Stub> stub = server.stub();
    go.arrive_and_wait();
    while (!done.load()) {
      v1::StatsResponse s;
      if (stats(*stub, &s).ok()) {
        result.most_shared_pages = std::max(result.most_shared_pages, s.shared_kv_pages());
        result.most_hit_rate = std::max(result.most_hit_rate, s.prefix_cache_hit_rate());
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  std::vector<std::thread> clients;
  for (int r = 0; r < kRequests; ++r) {
    clients.emplace_back([&, r] {
      std::unique_ptr<v1::Inference::Stub> stub = server.stub();
      v1::GenerateRequest request = greedy(token_request(ps[r], kNewTokens));
      request.mutable_stopping()->set_ignore_eos(true);
      request.set_add_bos(false);  // exactly the ids above: 1,512 prompt tokens each
      request.set_request_id("prefix-" + std::to_string(r));
      go.arrive_and_wait();
      streams[r] = stream_generate(*stub, request, seconds(120));
    });
  }
  for (std::thread& t : clients) t.join();
  result.wall_s = std::chrono::duration<double>(CallClock::now() - t0).count();
  done = true;
  poller.join();

  result.ok = true;
  for (int r = 0; r < kRequests; ++r) {
    const StreamResult& s = streams[r];
    EXPECT_TRUE(s.status.ok()) << "request " << r << ": " << describe(s.status);
    EXPECT_TRUE(s.has_usage) << "request " << r;
    EXPECT_EQ(static_cast<int>(s.tokens.size()), kNewTokens) << "request " << r;
    result.ok = result.ok && s.status.ok() && s.has_usage;
    result.outputs[r] = s.tokens;
    result.ttft_s[r] = s.usage.time_to_first_token_s();
  }
  std::unique_ptr<v1::Inference::Stub> stub = server.stub();
  EXPECT_TRUE(stats(*stub, &result.stats).ok());
  const std::optional<int> exit = server.stop(seconds(20));
  EXPECT_TRUE(exit.has_value() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << (exit ? describe_wait_status(*exit) : std::string("still running 20 s after SIGTERM"));
  if (::testing::Test::HasFailure()) std::fprintf(stderr, "--- launcher log (tail) ---\n%s\n", server.log_tail().c_str());
  return result;
}

void compare(const std::string& mode, const std::vector<std::string>& off_flags) {
  const RunResult off = serve(mode, off_flags);
  ASSERT_TRUE(off.ok);
  const RunResult on = serve(mode, {});
  ASSERT_TRUE(on.ok);
  for (int r = 0; r < kRequests; ++r) {
    EXPECT_EQ(on.outputs[r], off.outputs[r]) << mode << ": request " << r << " differs with the prefix cache";
  }
  const v1::StatsResponse& a = off.stats;
  const v1::StatsResponse& b = on.stats;
  const int64_t prompt_tokens = static_cast<int64_t>(kRequests) * (kSystemTokens + kOwnTokens);
  EXPECT_EQ(a.prompt_tokens(), prompt_tokens);
  EXPECT_EQ(b.prompt_tokens(), prompt_tokens);
  EXPECT_EQ(a.prompt_tokens_computed(), prompt_tokens);
  EXPECT_EQ(a.prompt_tokens_reused(), 0);
  EXPECT_EQ(b.prompt_tokens_computed() + b.prompt_tokens_reused(), prompt_tokens);
  const double drop = 1.0 - static_cast<double>(b.prompt_tokens_computed()) / a.prompt_tokens_computed();
  const double ttft_off = mean(off.ttft_s), ttft_on = mean(on.ttft_s);
  std::printf(
      "%s: prompt tokens computed %lld -> %lld (%.1f%% fewer), reused %lld, hit rate %.3f; mean time to first token "
      "%.3f s -> %.3f s (max %.3f s -> %.3f s); most shared pages while running %lld; at the end %lld free (%lld of "
      "them cached) of %lld pages; wall %.2f s -> %.2f s\n",
      mode.c_str(), static_cast<long long>(a.prompt_tokens_computed()),
      static_cast<long long>(b.prompt_tokens_computed()), 100.0 * drop,
      static_cast<long long>(b.prompt_tokens_reused()), b.prefix_cache_hit_rate(), ttft_off, ttft_on,
      *std::max_element(off.ttft_s.begin(), off.ttft_s.end()), *std::max_element(on.ttft_s.begin(), on.ttft_s.end()),
      static_cast<long long>(on.most_shared_pages), static_cast<long long>(b.free_kv_pages()),
      static_cast<long long>(b.cached_kv_pages()), static_cast<long long>(b.total_kv_pages()), off.wall_s, on.wall_s);
  EXPECT_GE(drop, 0.90);
  EXPECT_NEAR(b.prefix_cache_hit_rate(), static_cast<double>(b.prompt_tokens_reused()) / prompt_tokens, 1e-9);
  EXPECT_GE(b.prefix_cache_hit_rate(), 0.90);
  // The shared prompt's KV is computed once instead of 16 times: the mean wait for the first token
  // must fall well below half.
  EXPECT_LT(ttft_on, 0.5 * ttft_off);
  EXPECT_GT(on.most_shared_pages, kSystemTokens / 256) << "Stats never showed the system prompt's pages shared";
  EXPECT_EQ(off.most_shared_pages, 0);
  // No leak: with nothing running every page is free or cached (free_kv_pages counts both, as an
  // allocation may take either).
  EXPECT_EQ(a.free_kv_pages(), a.total_kv_pages());
  EXPECT_EQ(a.cached_kv_pages(), 0);
  EXPECT_EQ(b.free_kv_pages(), b.total_kv_pages());
  EXPECT_GT(b.cached_kv_pages(), 0);
  EXPECT_EQ(b.shared_kv_pages(), 0);
}

TEST(PrefixReuse, TensorParallelSameOutputsFarFewerPrefillTokens) { compare("tp", {"--no-prefix-cache"}); }

TEST(PrefixReuse, LayerSplitSameOutputsFarFewerPrefillTokens) { compare("layers", {"--prefix-cache=false"}); }

}  // namespace
}  // namespace exl3::testing
