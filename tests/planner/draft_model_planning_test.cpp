// The planner with speculative decoding's draft model (PlannerOptions::draft): the draft's bytes
// (weights, a cache of the plan's pages at the draft's cache bits, workspace) land on the lowest
// rank with the head (rank 0 in tp mode, the last rank of a layer split) as workspace, the model is
// planned within that rank's cap less them, and a cap too small for the draft is refused naming
// the rank.
#include <string>

#include "common/test_paths.h"
#include "coordinator/planner/shard_planner.h"
#include "gtest/gtest.h"
#include "worker/loader/safetensors.h"
#include "worker/model/config.h"

namespace exl3 {
namespace {

ModelFootprint fixture_footprint(const std::string& dir) {
  auto config = load_model_config(dir);
  EXL3_CHECK_OK(config.status());
  auto tensors = SafetensorsCollection::open_dir(dir);
  EXL3_CHECK_OK(tensors.status());
  auto fp = build_model_footprint(*config, BackendKind::kCpu, &*tensors);
  EXL3_CHECK_OK(fp.status());
  return *std::move(fp);
}

PlannerOptions options(PlanMode mode, const ModelFootprint* draft) {
  PlannerOptions o;
  o.mode = mode;
  o.caps = {4ull << 30, 4ull << 30};
  o.max_seq_len = 512;
  o.max_batch = 4;
  o.page_size = 256;
  o.step_tokens = 256;
  o.draft = draft;
  return o;
}

TEST(DraftModelPlanning, TheDraftLandsOnTheLowestRankWithTheHead) {
  const ModelFootprint target = fixture_footprint(testing::source_path("models/exl3-4.0bpw"));
  const std::string draft_dir = testing::shared_path("fixtures/exl3-2.5bpw");
  EXL3_REQUIRE_FILE(draft_dir + "/config.json");
  const ModelFootprint draft = fixture_footprint(draft_dir);
  for (const PlanMode mode : {PlanMode::kTensorParallel, PlanMode::kLayers}) {
    SCOPED_TRACE(plan_mode_name(mode));
    const auto plain = plan_shards(target, options(mode, nullptr));
    const PlannerOptions with = options(mode, &draft);
    const auto drafted = plan_shards(target, with);
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_TRUE(drafted.ok()) << drafted.status();
    const int rank = draft_model_rank(with);
    EXPECT_EQ(rank, mode == PlanMode::kTensorParallel ? 0 : 1);
    EXPECT_TRUE((*drafted)[rank].has_head);
    // Weights + F32 cache of 8 pages x 256 tokens x 4 layers x 2 x 256 + workspace.
    const uint64_t bytes = draft_model_bytes(draft, with.with_pages((*drafted)[rank].num_pages));
    EXPECT_GT(bytes, 8ull * 256 * 4 * 2 * 256 * 4);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ((*drafted)[r].weight_bytes, (*plain)[r].weight_bytes) << "rank " << r;
      EXPECT_EQ((*drafted)[r].cache_bytes, (*plain)[r].cache_bytes) << "rank " << r;
      EXPECT_EQ((*drafted)[r].workspace_bytes, (*plain)[r].workspace_bytes + (r == rank ? bytes : 0)) << "rank " << r;
    }
  }
}

// With --cache-bits (the coordinator sets them on the draft's footprint) the draft's cache is priced
// at those widths: 4,4 stores a 32-element group of K or V in 4·4 + 2 = 18 bytes instead of 32 F32.
TEST(DraftModelPlanning, TheDraftCacheIsPricedAtTheCacheBits) {
  const std::string draft_dir = testing::shared_path("fixtures/exl3-2.5bpw");
  EXL3_REQUIRE_FILE(draft_dir + "/config.json");
  const ModelFootprint full = fixture_footprint(draft_dir);
  ModelFootprint quantized = fixture_footprint(draft_dir);
  ASSERT_TRUE(quantized.set_cache_bits({4, 4}).ok());
  const PlannerOptions o = options(PlanMode::kTensorParallel, &full).with_pages(8);
  const uint64_t full_cache = full.total_cache_bytes(o.cache_tokens());
  const uint64_t quantized_cache = quantized.total_cache_bytes(o.cache_tokens());
  EXPECT_EQ(quantized_cache * 128, full_cache * 18);
  EXPECT_EQ(draft_model_bytes(full, o) - draft_model_bytes(quantized, o), full_cache - quantized_cache);
}

TEST(DraftModelPlanning, ACapWithoutRoomForTheDraftIsRefusedNamingTheRank) {
  const ModelFootprint target = fixture_footprint(testing::source_path("models/exl3-4.0bpw"));
  const std::string draft_dir = testing::shared_path("fixtures/exl3-2.5bpw");
  EXL3_REQUIRE_FILE(draft_dir + "/config.json");
  const ModelFootprint draft = fixture_footprint(draft_dir);
  PlannerOptions o = options(PlanMode::kTensorParallel, &draft);
  o.caps = {16ull << 20, 4ull << 30};
  const auto plans = plan_shards(target, o);
  ASSERT_FALSE(plans.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(plans.status())) << plans.status();
  EXPECT_NE(std::string(plans.status().message()).find("rank 0 holds the draft model"), std::string::npos)
      << plans.status();
}

}  // namespace
}  // namespace exl3
