// exl3-launch with a quantized KV cache end to end: 2 CPU workers (tensor parallel, 2 of the 4 KV
// heads of 64 each, 4 groups of 32 per rank) started with --cache-bits 4,4:
//   - ModelInfo reports the widths, and each rank's planned cache is priced at 4 bits: the ranks'
//     cache bytes add up to a whole number of tokens at 1152 bytes per token (4 layers x 8 groups x
//     18 bytes x 2 for K and V; 8192 at full precision on the CPU), at least --max-seq-len of them;
//   - the workers' own cache byte counts (Stats) equal the plan;
//   - greedy generation through the 4,4 cache streams the requested tokens, and its first tokens
//     are the ones an in-process forward through a 4,4 cache picks (later ones may part on a
//     near-tie: tensor-parallel fp32 sums differ from one rank's, which moves a key on a code
//     boundary to its neighbour);
//   - --cache-bits values outside 2..8 / 16 stop exl3-launch with exit code 2 naming the flag, and
//     --plan-only shows the widths in the plan table.
#include <cstdio>
#include <string>
#include <vector>

#include "bench/token_ids_file.h"
#include "gtest/gtest.h"
#include "integration/inference_calls.h"
#include "integration/run_command.h"
#include "integration/server_suite.h"
#include "worker/model/llama_model.h"

namespace exl3::testing {
namespace {

using std::chrono::seconds;

constexpr int kMaxSeqLen = 512;

class QuantizedCacheLaunch : public ServerSuite {
 protected:
  static void SetUpTestSuite() {
    LaunchConfig config;
    config.workers = 2;
    config.mode = "tp";
    config.max_seq_len = kMaxSeqLen;
    config.max_batch = 4;
    config.log_name = "quantized_cache_launch";
    config.extra_args = {"--cache-bits", "4,4"};
    start_server(config);
  }
};

TEST_F(QuantizedCacheLaunch, ModelInfoAndWorkersReportTheQuantizedCache) {
  auto stub = server().stub();
  grpc::ClientContext context;
  set_timeout(context, seconds(10));
  v1::ModelInfoResponse info;
  ASSERT_TRUE(stub->ModelInfo(&context, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.cache_k_bits(), 4);
  EXPECT_EQ(info.cache_v_bits(), 4);
  ASSERT_EQ(info.shards_size(), 2);
  int64_t total = 0;
  for (const v1::RankShard& s : info.shards()) {
    EXPECT_EQ(s.kv_heads(), 4 * 2) << "rank " << s.rank();  // 2 KV heads in each of 4 layers
    // Per rank and token: 4 layers x 4 groups x 18 bytes x 2.
    EXPECT_EQ(s.cache_bytes() % 576, 0) << "rank " << s.rank() << ": " << s.cache_bytes();
    total += s.cache_bytes();
  }
  ASSERT_EQ(total % 1152, 0) << total;
  const int64_t tokens = total / 1152;
  std::printf("2 ranks at 4,4: %lld cache bytes in all = %lld tokens\n", static_cast<long long>(total),
              static_cast<long long>(tokens));
  EXPECT_GE(tokens, kMaxSeqLen);
  EXPECT_EQ(tokens % 256, 0);

  // One call, so the serving loop has refreshed the workers' memory reports.
  const StreamResult r = stream_generate(*stub, greedy(text_request("The history of", 4)), seconds(60));
  ASSERT_TRUE(r.status.ok()) << describe(r.status);
  v1::StatsResponse st;
  ASSERT_TRUE(stats(*stub, &st).ok());
  ASSERT_EQ(st.workers_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(st.workers(i).cache_bytes(), info.shards(i).cache_bytes()) << "rank " << i;
  }
}

TEST_F(QuantizedCacheLaunch, GreedyGenerationMatchesInProcessQuantizedCache) {
  auto stub = server().stub();
  auto ids = load_token_sequences(std::string(EXL3_SOURCE_DIR) + "/tests/data/reference/heldout_ids.safetensors");
  ASSERT_TRUE(ids.ok()) << ids.status();
  const std::vector<int32_t> prompt((*ids)[0].begin() + 3000, (*ids)[0].begin() + 3040);
  constexpr int kNew = 24;
  v1::GenerateRequest request = greedy(token_request(prompt, kNew));
  request.mutable_stopping()->set_ignore_eos(true);
  const StreamResult r = stream_generate(*stub, request, seconds(120));
  ASSERT_TRUE(r.status.ok()) << describe(r.status);
  ASSERT_EQ(static_cast<int>(r.tokens.size()), kNew);
  EXPECT_EQ(r.finish_reason, v1::FINISH_REASON_LENGTH);

  auto model = LlamaModel::load(fixture_model_dir());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int32_t> seq = prompt;
  int agree = 0;
  for (int i = 0; i < kNew; ++i) {
    const KvCacheShape shape = (*model)->cache_shape(1, 256, {4, 4});
    KvCache cache(shape, (*model)->backend());
    PageTable table;
    ASSERT_TRUE(cache.reserve(table, static_cast<int64_t>(seq.size())).ok());
    const Tensor logits = (*model)->forward(seq, 0, cache, table, LogitsMode::kLast);
    const float* row = logits.data<float>();
    const int32_t next = static_cast<int32_t>(std::max_element(row, row + logits.dim(1)) - row);
    if (next != r.tokens[i]) break;
    ++agree;
    seq.push_back(next);
  }
  std::printf("served 4,4 greedy tokens agreeing with the in-process 4,4 cache: %d of %d\n", agree, kNew);
  EXPECT_GE(agree, 8);
}

TEST(QuantizedCacheLaunchFlags, BadCacheBitsAreRefusedNamingTheFlag) {
  for (const char* bad : {"4,9", "1", "4,4,4", "x"}) {
    const CommandResult r = run_command({std::string(EXL3_BIN_DIR) + "/exl3-launch", "--model", fixture_model_dir(),
                                         "--cpu-workers", "1", "--cache-bits", bad},
                                        std::chrono::seconds(30), "quantized_cache_bad_flag");
    EXPECT_TRUE(r.exited_with(2)) << bad << ": " << r.describe();
    EXPECT_NE(r.output.find("--cache-bits"), std::string::npos) << r.describe();
    EXPECT_NE(r.output.find("2..8"), std::string::npos) << r.describe();
  }
}

TEST(QuantizedCacheLaunchFlags, PlanOnlyShowsTheWidths) {
  const CommandResult r =
      run_command({std::string(EXL3_BIN_DIR) + "/exl3-launch", "--model", fixture_model_dir(), "--cpu-workers", "2",
                   "--split", "1,1", "--max-seq-len", "512", "--cache-bits", "8,4", "--plan-only"},
                  std::chrono::seconds(60), "quantized_cache_plan_only");
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_NE(r.output.find("KV cache K 8 bits, V 4 bits"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace exl3::testing
