// The planner's CUDA pricing (model_footprint.h, shard_planner.h), checked on the CPU: the KV cache
// at 2 bytes per element, the BF16 embedding in pinned host memory (no device bytes) and F32 norms
// on every tensor-parallel rank, the
// forward-workspace mirror equal to LlamaModel::workspace_bytes_for on real shards (the CPU
// backend's A = 4 bytes; the CUDA case A = 2 by hand), the scratch mirror by hand, the fixed
// overheads of the table, and a cap too small for them refused by rank. The same figures against
// a real CUDA backend: cuda_allocation_gpu_test.cpp.
#include <memory>

#include "common/test_paths.h"
#include "coordinator/planner/byte_units.h"
#include "coordinator/planner/plan_table.h"
#include "coordinator/planner/shard_planner.h"
#include "gtest/gtest.h"
#include "kernels/attention_scratch.h"
#include "planner/rank_plan_conversions.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"
#include "worker/model/model_shard.h"

namespace exl3 {
namespace {

using testing::shape_of;

class CudaFootprint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::source_path("models/exl3-4.0bpw");
    auto config = load_model_config(dir_);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto tensors = SafetensorsCollection::open_dir(dir_);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    auto fp = build_model_footprint(config_, BackendKind::kCuda, &*tensors);
    ASSERT_TRUE(fp.ok()) << fp.status();
    fp_ = *fp;
  }

  PlannerOptions options(PlanMode mode, const std::vector<double>& caps_gib) const {
    PlannerOptions o;
    o.mode = mode;
    for (double g : caps_gib) o.caps.push_back(gib_to_bytes(g));
    o.max_seq_len = 300;  // 2 pages of 192 per sequence
    o.max_batch = 3;
    o.page_size = 192;
    o.step_tokens = 77;
    return o;
  }

  std::string dir_;
  ModelConfig config_;
  ModelFootprint fp_;
};

// 2 bytes per element: K and V of every held KV head, head_dim, every page slot.
TEST_F(CudaFootprint, KvCacheIsF16) {
  for (PlanMode mode : {PlanMode::kTensorParallel, PlanMode::kLayers}) {
    const PlannerOptions o = options(mode, {20, 24});
    auto plans = plan_shards(fp_, o);
    ASSERT_TRUE(plans.ok()) << plans.status();
    uint64_t total = 0;
    for (const RankPlan& p : *plans) {
      SCOPED_TRACE(::testing::Message() << plan_mode_name(mode) << " rank " << p.rank);
      KvCacheShape shape;
      shape.layer_kv_heads.assign(config_.num_layers, 0);
      for (const LayerPlan& l : p.layers) shape.layer_kv_heads[l.layer] = l.kv_head_end - l.kv_head_begin;
      shape.head_dim = config_.head_dim;
      shape.num_pages = p.num_pages;
      shape.page_size = p.page_size;
      EXPECT_EQ(p.cache_bytes, KvCache::bytes_for(shape, 2));
      total += p.cache_bytes;
    }
    // 4 layers x 4 KV heads x (K, V) x 64 x 2 bytes x 6 pages x 192 slots.
    EXPECT_EQ(total, 4u * 4 * 2 * 64 * 2 * 6 * 192);
  }
}

// A tensor-parallel rank holding no units still embeds, from the BF16 table as stored (2 bytes per
// element) in pinned host memory, which costs no device bytes, and holds every norm as F32.
TEST_F(CudaFootprint, EmbeddingInHostMemoryOnEveryTpRank) {
  EXPECT_EQ(fp_.embedding_bytes, 0u);
  EXPECT_EQ(fp_.embedding_host_bytes, 2u * 4096 * 512);
  const PlannerOptions o = options(PlanMode::kTensorParallel, {20, 24, 20});
  RankPlan empty;
  empty.mode = PlanMode::kTensorParallel;
  empty.rank = 1;
  empty.world_size = 3;
  empty.first_layer = 0;
  empty.end_layer = config_.num_layers;
  for (int64_t l = 0; l < config_.num_layers; ++l) empty.layers.push_back(LayerPlan{l, 2, 2, 640, 640});
  empty.has_embedding = empty.has_head = true;
  empty.vocab_begin = empty.vocab_end = 1024;
  const RankBytes b = price_rank(fp_, o, empty);
  EXPECT_EQ(b.weights, 4u * 512 * (2 * 4 + 1));  // input and post-attention norms of 4 layers, final norm
  EXPECT_EQ(b.cache, 0u);
  EXPECT_EQ(b.workspace, rank_reserve_bytes(fp_, o));
  auto plans = plan_shards(fp_, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  for (const RankPlan& p : *plans) EXPECT_GE(p.weight_bytes, 4u * 512 * (2 * 4 + 1)) << "rank " << p.rank;
  const std::string table = format_plan_table(fp_, *plans, o.caps, &o);
  EXPECT_NE(table.find("embedding 4.00 MiB in pinned host memory on every rank"), std::string::npos) << table;
}

// forward_workspace_bytes replays LlamaModel::take_buffers: with the CPU backend's 4-byte
// activations it must give workspace_bytes_for exactly, for every rank of real plans and odd limits.
TEST_F(CudaFootprint, WorkspaceMirrorEqualsTheModel) {
  const StepLimits limits{77, 3, 13, 5};
  const StepShape step{limits.max_step_tokens, limits.max_seqs, limits.max_pages_per_seq, limits.max_logit_rows};
  for (PlanMode mode : {PlanMode::kTensorParallel, PlanMode::kLayers}) {
    for (const std::vector<double>& caps : {std::vector<double>{2, 6}, std::vector<double>{2, 2, 4}}) {
      auto plans = plan_shards(fp_, options(mode, caps));
      ASSERT_TRUE(plans.ok()) << plans.status();
      for (const RankPlan& p : *plans) {
        SCOPED_TRACE(::testing::Message() << plan_mode_name(mode) << " " << caps.size() << " ranks, rank " << p.rank);
        auto model = LlamaModel::load_shard(dir_, model_shard_of(p));
        ASSERT_TRUE(model.ok()) << model.status();
        ASSERT_EQ((*model)->backend().activation_dtype(), DType::kF32);
        EXPECT_EQ(forward_workspace_bytes(config_, shape_of(p), step, 4), (*model)->workspace_bytes_for(limits));
      }
    }
  }
}

// The CUDA case (A = 2) for the whole fixture model, one token: every buffer of take_buffers
// rounded up to 256 bytes.
TEST_F(CudaFootprint, CudaWorkspaceByHand) {
  const RankShape whole = widest_rank_shape(config_, /*tensor_parallel=*/false, 1);
  const StepShape one{1, 1, 1, 1};
  // ids, positions, sequences, page table, logits rows: 5 x 256; x 2048; h 1024; q 1024; k, v 512
  // each; attention 1024; projection 2048; gate, up, act 3072 each; selected 2048; normed 1024;
  // logits 16384; no gather; widths 2 x 256.
  EXPECT_EQ(forward_workspace_bytes(config_, whole, one, 2), 38656u);
  EXPECT_EQ(widest_padded_features(config_, whole), 4096);
  RankShape slice = whole;
  slice.vocab_rows = 1000;  // widest is then the MLP: max(hidden 512, q 512, MLP 1536, vocab 1000)
  EXPECT_EQ(widest_padded_features(config_, slice), 1536);
  slice.mlp_columns = 700;  // 1000 vocabulary rows, padded to 1024
  EXPECT_EQ(widest_padded_features(config_, slice), 1024);
}

// Linear scratch F16 + F32 [rows, features] plus split-K attention partials (at most 32768 rows
// of head_dim + 2 floats: twice the largest split target, kMaxSplitTargetRows).
TEST_F(CudaFootprint, ScratchByHand) {
  const uint64_t staging = uint64_t{64} << 20;  // decoded EXL3 rows of a long prefill
  EXPECT_EQ(cuda_scratch_bytes(256, 4096), 256u * 4096 * 6 + 4u * 32768 * 130 + staging);
  EXPECT_EQ(cuda_scratch_bytes(1, 128), 6u * 128 + 4u * (1 * 2 * 64) * 130 + staging);
  EXPECT_EQ(attention_scratch::floats(3, 5, 64), 3 * 5 * 64 * 66);
}

// The reserve of every CUDA rank: workspace, scratch and engine buffers for the widest rank, the
// cuBLAS workspace, the context, and NCCL buffers only in a group.
TEST_F(CudaFootprint, ReserveAddsTheFixedOverheads) {
  const PlannerOptions two = options(PlanMode::kTensorParallel, {20, 24});
  const CudaRankReserve r = cuda_plan_reserve(fp_, two);
  EXPECT_EQ(r.context, kCudaOverheads.context_bytes);
  EXPECT_EQ(r.nccl, kCudaOverheads.nccl_bytes);
  EXPECT_EQ(r.context, uint64_t{600} << 20);  // measured 597 MiB on an H200
  EXPECT_EQ(r.nccl, uint64_t{900} << 20);     // measured 865 MiB per rank, two NVLink H200s
  EXPECT_EQ(r.allocator_fixed, (uint64_t{32} << 20) + 16);
  EXPECT_EQ(r.engine, 4u * 32 + 4u * 3);  // inv_freq [head_dim / 2], sampled tokens [max_batch]
  EXPECT_EQ(r.scratch, cuda_scratch_bytes(77, 4096));
  EXPECT_EQ(r.total(), rank_reserve_bytes(fp_, two));
  EXPECT_EQ(cuda_plan_reserve(fp_, options(PlanMode::kTensorParallel, {20})).nccl, 0u);
}

// The CUDA context alone does not fit half a GiB: refused before loading, naming the rank and the
// shortfall.
TEST_F(CudaFootprint, CapBelowTheOverheadsIsRefusedByRank) {
  const PlannerOptions o = options(PlanMode::kTensorParallel, {0.5, 24});
  auto plans = plan_shards(fp_, o);
  ASSERT_EQ(plans.status().code(), absl::StatusCode::kResourceExhausted) << plans.status();
  const std::string msg(plans.status().message());
  const uint64_t base = fp_.replicated_bytes() + rank_reserve_bytes(fp_, o);
  EXPECT_NE(msg.find("rank 0 needs " + format_bytes(base - gib_to_bytes(0.5)) + " more than its 512.00 MiB cap"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("CUDA overheads"), std::string::npos) << msg;
}

TEST_F(CudaFootprint, PlanTableShowsTheCudaReserve) {
  const PlannerOptions o = options(PlanMode::kTensorParallel, {20, 24});
  auto plans = plan_shards(fp_, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  const std::string table = format_plan_table(fp_, *plans, o.caps, &o);
  std::printf("%s", table.c_str());
  for (const char* needle : {"tensor-parallel plan over 2 ranks, cuda backend", "KV cache F16", "CUDA context 600.00 MiB",
                             "NCCL 900.00 MiB", "cuBLAS 32.00 MiB", "20.00 GiB", "24.00 GiB",
                             "KV cache: 6 pages of 192 tokens per rank (1152 tokens: max-batch 3 x 300)"}) {
    EXPECT_NE(table.find(needle), std::string::npos) << needle << "\n" << table;
  }
}

}  // namespace
}  // namespace exl3
