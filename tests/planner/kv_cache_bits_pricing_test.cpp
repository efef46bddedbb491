// The planner prices KV pages at the --cache-bits widths. Per layer and token, K (and V) of
// token_dim = KV heads x head_dim elements costs token_dim x element bytes at 16 (CPU fp32: 4,
// CUDA fp16: 2) and token_dim / 32 x (4 x bits + 2) bytes quantized (bits I32 words and one fp16
// scale per 32-element group). Checked with hand-computed numbers for 16,16 / 4,4 / 8,4 on an 8B
// shape (CPU) and on the fixture (CUDA, from its safetensors headers); per-rank bytes of a
// tensor-parallel split; the bytes a CPU worker really allocates for each planned rank; the same
// caps fitting proportionally more pages; --cache-tokens refused at 16 bits and planned at 4;
// the refusal of a quantized cache whose per-rank vectors miss a multiple of 32.
#include <memory>

#include "common/test_paths.h"
#include "coordinator/planner/plan_table.h"
#include "coordinator/planner/shard_planner.h"
#include "gtest/gtest.h"
#include "planner/llama_shapes.h"
#include "planner/rank_plan_conversions.h"
#include "worker/kv_cache.h"
#include "worker/model/llama_model.h"

namespace exl3 {
namespace {

ModelFootprint footprint(const ModelConfig& c, BackendKind backend, KvCacheBits bits,
                         const SafetensorsCollection* tensors = nullptr) {
  auto fp = build_model_footprint(c, backend, tensors);
  EXL3_CHECK_OK(fp.status());
  EXL3_CHECK_OK(fp->set_cache_bits(bits));
  return *std::move(fp);
}

TEST(KvCachePricing, BytesPerTokenCpu8B) {
  // token_dim = 8 x 128 = 1024 = 32 groups, 32 layers.
  //   16,16: (1024 x 4) x 2 x 32            = 262144
  //   4,4:   32 x (16 + 2) x 2 x 32         = 36864
  //   8,4:   (32 x (32 + 2) + 32 x 18) x 32 = 53248
  const struct {
    KvCacheBits bits;
    uint64_t per_token;
  } cases[] = {{{16, 16}, 262144}, {{4, 4}, 36864}, {{8, 4}, 53248}, {{16, 4}, 4096 * 32 + 576 * 32}};
  for (const auto& c : cases) {
    const ModelFootprint fp = footprint(testing::llama3_8b_config(), BackendKind::kCpu, c.bits);
    EXPECT_EQ(fp.total_cache_bytes(1), c.per_token) << kv_cache_bits_name(c.bits);
    EXPECT_EQ(fp.total_cache_bytes(1000), 1000 * c.per_token) << kv_cache_bits_name(c.bits);
    EXPECT_EQ(fp.layer_cache_bytes(5, 1), c.per_token / 32) << kv_cache_bits_name(c.bits);
  }
  // One attention unit (1 KV head of 128 = 4 groups) at 4,4: 2 x 4 x 18 bytes per token.
  const ModelFootprint q = footprint(testing::llama3_8b_config(), BackendKind::kCpu, {4, 4});
  EXPECT_EQ(q.layers[0].attention.cache_bytes(2, 3, 10), 10u * 2u * 4u * 18u);
}

struct Fixture {
  std::string dir = testing::source_path("models/exl3-4.0bpw");
  ModelConfig config;
  std::unique_ptr<SafetensorsCollection> tensors;
  Fixture() {
    auto c = load_model_config(dir);
    EXL3_CHECK_OK(c.status());
    config = *c;
    auto t = SafetensorsCollection::open_dir(dir);
    EXL3_CHECK_OK(t.status());
    tensors = std::make_unique<SafetensorsCollection>(*std::move(t));
  }
};

TEST(KvCachePricing, BytesPerTokenCudaFixture) {
  Fixture f;
  // 4 layers, 4 KV heads x 64 = 256 elements = 8 groups.
  //   16,16: 256 x 2 x 2 x 4           = 4096
  //   4,4:   8 x 18 x 2 x 4            = 1152
  //   8,4:   (8 x 34 + 8 x 18) x 4     = 1664
  EXPECT_EQ(footprint(f.config, BackendKind::kCuda, {16, 16}, f.tensors.get()).total_cache_bytes(1), 4096u);
  EXPECT_EQ(footprint(f.config, BackendKind::kCuda, {4, 4}, f.tensors.get()).total_cache_bytes(1), 1152u);
  EXPECT_EQ(footprint(f.config, BackendKind::kCuda, {8, 4}, f.tensors.get()).total_cache_bytes(1), 1664u);
  EXPECT_EQ(footprint(f.config, BackendKind::kCuda, {2, 2}, f.tensors.get()).total_cache_bytes(1), 8u * 10u * 2u * 4u);
}

PlannerOptions small_options(PlanMode mode, std::vector<uint64_t> caps) {
  PlannerOptions o;
  o.mode = mode;
  o.caps = std::move(caps);
  o.max_seq_len = 512;
  o.max_batch = 2;
  o.page_size = 64;
  o.step_tokens = 32;
  return o;
}

// Every rank of a plan at 4,4 and 8,4: the planned cache bytes equal what a CPU worker holding that
// shard allocates (KvCache on the CPU backend: the backend's own allocation count), and in a
// tensor-parallel split the ranks' caches add up to the whole model's.
TEST(KvCachePricing, CpuWorkerAllocatesThePlannedCache) {
  Fixture f;
  for (const KvCacheBits bits : {KvCacheBits{4, 4}, KvCacheBits{8, 4}, KvCacheBits{16, 3}}) {
    for (const PlanMode mode : {PlanMode::kTensorParallel, PlanMode::kLayers}) {
      SCOPED_TRACE(::testing::Message() << kv_cache_bits_name(bits) << " " << plan_mode_name(mode));
      const ModelFootprint fp = footprint(f.config, BackendKind::kCpu, bits, f.tensors.get());
      auto plans = plan_shards(fp, small_options(mode, {uint64_t{1} << 30, uint64_t{1} << 30}));
      ASSERT_TRUE(plans.ok()) << plans.status();
      uint64_t sum = 0;
      for (const RankPlan& p : *plans) {
        auto model = LlamaModel::load_shard(f.dir, model_shard_of(p));
        ASSERT_TRUE(model.ok()) << model.status();
        const KvCacheShape shape = (*model)->cache_shape(p.num_pages, p.page_size, bits);
        Backend& be = (*model)->backend();
        const uint64_t before = be.allocated_bytes();
        auto cache = KvCache::create(shape, be);
        ASSERT_TRUE(cache.ok()) << cache.status();
        EXPECT_EQ((*cache)->bytes(), p.cache_bytes) << "rank " << p.rank;
        EXPECT_EQ(be.allocated_bytes() - before, p.cache_bytes) << "rank " << p.rank;
        sum += p.cache_bytes;
      }
      EXPECT_EQ(sum, fp.total_cache_bytes(plans->front().num_pages * 64));
    }
  }
}

// Caps too small for max-batch full-length sequences: the planner fits the most pages, which at
// 4,4 (1152 vs 8192 bytes per token on this CPU fixture: 4 layers x 256 x 4 bytes x 2) is about
// 7x as many as at 16,16, and exactly the most that fit (one page more is refused).
TEST(KvCachePricing, SameCapsFitMorePages) {
  Fixture f;
  const ModelFootprint full = footprint(f.config, BackendKind::kCpu, {16, 16}, f.tensors.get());
  const ModelFootprint q4 = footprint(f.config, BackendKind::kCpu, {4, 4}, f.tensors.get());
  EXPECT_EQ(full.total_cache_bytes(1), 8192u);
  EXPECT_EQ(q4.total_cache_bytes(1), 1152u);
  PlannerOptions o = small_options(PlanMode::kTensorParallel, {});
  o.max_batch = 4096;  // asks for 4096 x 8 pages: never fits
  // Room for 200 pages of 64 tokens at 16,16 besides weights and workspace.
  const uint64_t fixed = full.total_weight_bytes() + rank_reserve_bytes(full, o);
  o.caps = {fixed + 200 * 64 * 8192};
  auto p16 = plan_shards(full, o);
  auto p4 = plan_shards(q4, o);
  ASSERT_TRUE(p16.ok()) << p16.status();
  ASSERT_TRUE(p4.ok()) << p4.status();
  const int64_t pages16 = p16->front().num_pages, pages4 = p4->front().num_pages;
  std::printf("same cap: %lld pages at 16,16, %lld pages at 4,4 (ratio %.3f, bytes ratio %.3f)\n",
              static_cast<long long>(pages16), static_cast<long long>(pages4), static_cast<double>(pages4) / pages16,
              8192.0 / 1152.0);
  EXPECT_EQ(pages16, 200);
  // 200 x 8192 / 1152 = 1422.2 pages of room.
  EXPECT_EQ(pages4, 1422);
  EXPECT_FALSE(plan_shards(q4, o.with_pages(pages4 + 1)).ok());
  const std::string table = format_plan_table(q4, *p4, o.caps, &o);
  EXPECT_NE(table.find("KV cache K 4 bits, V 4 bits"), std::string::npos) << table;
  const std::string full_table = format_plan_table(full, *p16, o.caps, &o);
  EXPECT_NE(full_table.find("KV cache F32"), std::string::npos) << full_table;
}

// --cache-tokens that a cap cannot hold at full precision plans at 4,4.
TEST(KvCachePricing, RequestedCacheTokensFitQuantized) {
  Fixture f;
  const ModelFootprint full = footprint(f.config, BackendKind::kCpu, {16, 16}, f.tensors.get());
  const ModelFootprint q4 = footprint(f.config, BackendKind::kCpu, {4, 4}, f.tensors.get());
  PlannerOptions o = small_options(PlanMode::kTensorParallel, {});
  o.requested_cache_tokens = 64 * 1000;
  const uint64_t fixed = full.total_weight_bytes() + rank_reserve_bytes(full, o);
  o.caps = {fixed + 64 * 1000 * 2000};  // 2000 bytes per token: above 1152, below 8192
  auto refused = plan_shards(full, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  auto planned = plan_shards(q4, o);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->front().num_pages, 1000);
  EXPECT_EQ(planned->front().cache_bytes, 64u * 1000u * 1152u);
}

TEST(KvCachePricing, RefusesVectorsNotMultipleOf32) {
  ModelConfig c = testing::llama3_8b_config();
  c.num_kv_heads = 1;
  c.num_heads = 8;
  c.head_dim = 80;  // one unit of 80 elements
  c.hidden_size = 640;
  auto fp = build_model_footprint(c, BackendKind::kCpu);
  ASSERT_TRUE(fp.ok()) << fp.status();
  const absl::Status s = fp->set_cache_bits({4, 16});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("multiple of 32"), std::string::npos) << s;
  EXPECT_TRUE(fp->set_cache_bits({16, 16}).ok());
  const absl::Status width = fp->set_cache_bits({4, 1});
  ASSERT_FALSE(width.ok());
  EXPECT_NE(std::string(width.message()).find("--cache-bits"), std::string::npos) << width;
}

}  // namespace
}  // namespace exl3
