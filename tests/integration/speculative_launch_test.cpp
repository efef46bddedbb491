// exl3-launch with speculative decoding end to end on CPU workers: ExLlamaV3's 2.5 bpw fixture
// (--draft-model) drafts for the 4.0 bpw model it shares a tokenizer with.
//   - greedy completions through the API equal the same server's without a draft, over 2 tensor-
//     parallel workers and over 2 layer-split workers (the drafting rank is rank 0 in the first, the
//     head's rank 1 in the second);
//   - Stats counts the rounds, proposed and accepted draft tokens; ModelInfo names the draft;
//   - a draft whose tokenizer differs is refused at start, naming the file.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/launched_server.h"
#include "integration/run_command.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

constexpr int kNewTokens = 40;
const std::vector<std::string> kPrompts = {"The history of the city", "Once upon a time, in a small village",
                                           "The main function of the"};

std::string draft_dir() { return shared_path("fixtures/exl3-2.5bpw"); }

struct Served {
  std::vector<std::vector<int32_t>> tokens;  // per prompt
  v1::StatsResponse stats;
  v1::ModelInfoResponse info;
  std::string log;  // the launcher's
};

// Launches `workers` CPU workers in `mode` (with the draft when `draft`), runs every prompt greedily
// and stops the server, which must exit cleanly. The layer split runs with --cache-bits 4,4, which
// the draft's cache takes too.
Served serve(const std::string& mode, bool draft) {
  LaunchConfig config;
  config.workers = 2;
  config.mode = mode;
  config.max_batch = 4;
  config.log_name = "speculative_" + mode + (draft ? "_draft" : "_plain");
  if (draft) config.extra_args = {"--draft-model", draft_dir(), "--draft-tokens", "4"};
  if (mode == "layers") config.extra_args.insert(config.extra_args.end(), {"--cache-bits", "4,4"});
  Served out;
  auto server = LaunchedServer::start(config, seconds(60));
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return out;
  auto stub = (*server)->stub();
  for (const std::string& prompt : kPrompts) {
    const StreamResult r = stream_generate(*stub, greedy(text_request(prompt, kNewTokens)), seconds(120));
    EXPECT_TRUE(r.status.ok()) << describe(r.status) << "\n" << (*server)->log_tail();
    EXPECT_EQ(r.tokens.size(), static_cast<size_t>(kNewTokens));
    out.tokens.push_back(r.tokens);
  }
  EXPECT_TRUE(stats(*stub, &out.stats).ok());
  grpc::ClientContext context;
  set_timeout(context, seconds(10));
  EXPECT_TRUE(stub->ModelInfo(&context, v1::ModelInfoRequest(), &out.info).ok());
  const std::optional<int> exit = (*server)->stop(seconds(20));
  EXPECT_TRUE(exit && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0) << (*server)->log_tail();
  out.log = (*server)->log();
  return out;
}

TEST(SpeculativeLaunch, GreedyOutputEqualsServingWithoutADraft) {
  EXL3_REQUIRE_FILE(draft_dir() + "/model.safetensors");
  for (const std::string mode : {"tp", "layers"}) {
    SCOPED_TRACE(mode);
    const Served plain = serve(mode, false);
    const Served drafted = serve(mode, true);
    ASSERT_EQ(plain.tokens.size(), kPrompts.size());
    ASSERT_EQ(drafted.tokens.size(), kPrompts.size());
    for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(drafted.tokens[i], plain.tokens[i]) << kPrompts[i];
    const v1::StatsResponse& s = drafted.stats;
    std::printf("%s: %lld rounds, %lld of %lld draft tokens accepted (%.1f%%), %lld tokens generated in %lld "
                "steps\n",
                mode.c_str(), static_cast<long long>(s.speculative_rounds()),
                static_cast<long long>(s.draft_tokens_accepted()), static_cast<long long>(s.draft_tokens_proposed()),
                s.draft_tokens_proposed() > 0 ? 100.0 * s.draft_tokens_accepted() / s.draft_tokens_proposed() : 0.0,
                static_cast<long long>(s.generated_tokens()), static_cast<long long>(s.steps()));
    EXPECT_GT(s.speculative_rounds(), 0);
    EXPECT_LE(s.draft_tokens_proposed(), 4 * s.speculative_rounds());  // fewer near max_new_tokens
    EXPECT_GT(s.draft_tokens_proposed(), 3 * s.speculative_rounds());
    EXPECT_GT(s.draft_tokens_accepted(), 0);
    EXPECT_LE(s.draft_tokens_accepted(), s.draft_tokens_proposed());
    EXPECT_LT(s.steps(), plain.stats.steps());
    EXPECT_EQ(plain.stats.speculative_rounds(), 0);
    EXPECT_EQ(drafted.info.draft_model_dir(), draft_dir());
    EXPECT_EQ(drafted.info.draft_tokens(), 4);
    EXPECT_EQ(s.free_kv_pages(), s.total_kv_pages());
    const std::string cache = mode == "layers" ? "KV cache at 4,4 bits" : "KV cache at 16,16 bits";
    EXPECT_NE(drafted.log.find(cache), std::string::npos) << "expected \"" << cache << "\" in\n" << drafted.log;
  }
}

TEST(SpeculativeLaunch, DraftWithAnotherTokenizerIsRefused) {
  // A copy of the 2.5 bpw draft whose tokenizer.json has one byte more.
  const std::string dir = work_path("draft-other-tokenizer");
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(draft_dir())) {
    const std::string name = entry.path().filename().string();
    std::filesystem::remove(dir + "/" + name);
    if (name == "tokenizer.json") {
      std::filesystem::copy_file(entry.path(), dir + "/" + name);
      std::ofstream(dir + "/" + name, std::ios::app) << " ";
    } else {
      std::filesystem::create_symlink(entry.path(), dir + "/" + name);
    }
  }
  const CommandResult r =
      run_command({std::string(EXL3_BIN_DIR) + "/exl3-launch", "--model", fixture_model_dir(), "--cpu-workers", "1",
                   "--port", "0", "--draft-model", dir},
                  seconds(60), "speculative_bad_draft");
  EXPECT_TRUE(r.failed()) << r.describe();
  EXPECT_NE(r.output.find("tokenizer.json differs"), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace exl3::testing
