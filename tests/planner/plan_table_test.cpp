// Tests of the plan table (coordinator/planner/plan_table.h): the per-rank rows, ranges that
// differ between layers summarised by runs of layers, and example tables printed for reading.
#include "coordinator/planner/plan_table.h"

#include <iostream>

#include "coordinator/planner/byte_units.h"
#include "gtest/gtest.h"
#include "planner/llama_shapes.h"

namespace exl3 {
namespace {

PlannerOptions options(PlanMode mode, std::vector<uint64_t> caps) {
  PlannerOptions o;
  o.mode = mode;
  o.caps = std::move(caps);
  o.max_seq_len = 8192;
  o.max_batch = 2;
  o.page_size = 256;
  o.step_tokens = 512;
  return o;
}

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// --split 20,24 style caps for the fp32 CPU worker of an 8B model (about 32 GiB of weights).
TEST(PlanTable, TensorParallelTwoRanks) {
  auto fp = build_model_footprint(testing::llama3_8b_config(), BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const std::vector<uint64_t> caps = {gib_to_bytes(20), gib_to_bytes(24)};
  auto plans = plan_shards(*fp, options(PlanMode::kTensorParallel, caps));
  ASSERT_TRUE(plans.ok()) << plans.status();
  const std::string table = format_plan_table(*fp, *plans, caps);
  std::cout << table << std::endl;
  EXPECT_TRUE(contains(table, "tensor-parallel plan over 2 ranks, cpu backend")) << table;
  EXPECT_TRUE(contains(table, "units: attention 8 x 1 KV head")) << table;
  EXPECT_TRUE(contains(table, format_bytes((*plans)[0].total_bytes()))) << table;
  EXPECT_TRUE(contains(table, "20.00 GiB")) << table;
  EXPECT_TRUE(contains(table, "24.00 GiB")) << table;
  EXPECT_TRUE(contains(table, "0-31")) << table;
}

TEST(PlanTable, LayerSplitFourRanks) {
  auto fp = build_model_footprint(testing::llama3_8b_config(), BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const std::vector<uint64_t> caps = {gib_to_bytes(8), gib_to_bytes(12), 0, gib_to_bytes(20)};
  auto plans = plan_shards(*fp, options(PlanMode::kLayers, caps));
  ASSERT_TRUE(plans.ok()) << plans.status();
  const std::string table = format_plan_table(*fp, *plans, caps);
  std::cout << table << std::endl;
  EXPECT_TRUE(contains(table, "layer-split plan over 4 ranks")) << table;
  EXPECT_TRUE(contains(table, "embed")) << table;
  EXPECT_TRUE(contains(table, "head")) << table;
  EXPECT_TRUE(contains(table, "none")) << table;  // rank 2 holds no layers
}

// Per-layer ranges that differ are printed as runs of layers, one per line.
TEST(PlanTable, SummarisesRangesThatDifferBetweenLayers) {
  auto fp = build_model_footprint(testing::llama3_8b_config(), BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const std::vector<uint64_t> caps = {gib_to_bytes(30), gib_to_bytes(30)};
  auto plans = plan_shards(*fp, options(PlanMode::kTensorParallel, caps));
  ASSERT_TRUE(plans.ok()) << plans.status();
  // Hand-edit: rank 0 holds KV heads 0-2 in layers 28-31, rank 1 the rest.
  for (int64_t l = 28; l < 32; ++l) {
    (*plans)[0].layers[l].kv_head_end = 3;
    (*plans)[1].layers[l].kv_head_begin = 3;
  }
  const std::string table = format_plan_table(*fp, *plans, caps);
  std::cout << table << std::endl;
  EXPECT_TRUE(contains(table, "0-3 (layers 0-27)")) << table;
  EXPECT_TRUE(contains(table, "0-2 (layers 28-31)")) << table;
  EXPECT_TRUE(contains(table, "0-11 (layers 28-31)")) << table;  // query heads follow, 4 per KV head
  EXPECT_TRUE(contains(table, "3-7 (layers 28-31)")) << table;
}

}  // namespace
}  // namespace exl3
