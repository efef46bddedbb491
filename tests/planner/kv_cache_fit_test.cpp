// The planner's KV cache sizing and CUDA calibration on a Llama-3.1-70B-shape EXL3 model (4.0 bpw
// decoder, 6 bpw head, BF16 embedding, as exl3-bench make-model writes it), made as a sparse file:
// the safetensors header is real, the 36 GiB data section is a hole, so the CUDA footprint reads
// true stored sizes without any disk use. Checked:
//   - caps 20,24 GiB with max-seq-len 8192: max-batch 16 x 32 pages do not fit, the plan fits the
//     largest page count that does (one more page is refused), the same on both ranks, every rank
//     within its cap, and the plan table says so;
//   - caps 16,16: refused, naming each rank and its shortfall; caps raised by the stated amounts plan;
//   - an explicit cache size (--cache-tokens) is planned exactly (rounded up to whole pages), or
//     refused naming the rank when too big, or refused as less than one full-length sequence;
//   - the embedding costs no device memory on CUDA (pinned host memory) but fp32 RAM on the CPU;
//   - NCCL buffers (900 MiB) are charged only in a group of more than one rank.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/test_paths.h"
#include "coordinator/planner/byte_units.h"
#include "coordinator/planner/plan_table.h"
#include "coordinator/planner/shard_planner.h"
#include "gtest/gtest.h"
#include "planner/llama_shapes.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

int64_t pad128(int64_t v) { return (v + 127) / 128 * 128; }

struct HeaderEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

void add(std::vector<HeaderEntry>& out, std::string name, std::string dtype, std::vector<int64_t> shape,
         uint64_t element) {
  uint64_t n = element;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  out.push_back({std::move(name), std::move(dtype), std::move(shape), n});
}

// An EXL3 linear as exl3-bench stores it: trellis I16 [k/16, n/16, 16 K], suh [k], svh [n] F16
// (padded sizes), the mul1 codebook marker.
void add_linear(std::vector<HeaderEntry>& out, const std::string& prefix, int64_t in, int64_t out_features, int k) {
  const int64_t kp = pad128(in), np = pad128(out_features);
  add(out, prefix + ".trellis", "I16", {kp / 16, np / 16, 16 * k}, 2);
  add(out, prefix + ".suh", "F16", {kp}, 2);
  add(out, prefix + ".svh", "F16", {np}, 2);
  add(out, prefix + ".mul1", "I32", {}, 4);
}

// Writes `dir`/model.safetensors with a real header and a sparse data section.
void write_sparse_model(const std::string& dir, const ModelConfig& c, int decoder_bits, int head_bits) {
  std::vector<HeaderEntry> t;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  add(t, "model.embed_tokens.weight", "BF16", {c.vocab_size, h}, 2);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    add(t, p + "input_layernorm.weight", "BF16", {h}, 2);
    add(t, p + "post_attention_layernorm.weight", "BF16", {h}, 2);
    add_linear(t, p + "self_attn.q_proj", h, q, decoder_bits);
    add_linear(t, p + "self_attn.k_proj", h, kv, decoder_bits);
    add_linear(t, p + "self_attn.v_proj", h, kv, decoder_bits);
    add_linear(t, p + "self_attn.o_proj", q, h, decoder_bits);
    add_linear(t, p + "mlp.gate_proj", h, c.intermediate_size, decoder_bits);
    add_linear(t, p + "mlp.up_proj", h, c.intermediate_size, decoder_bits);
    add_linear(t, p + "mlp.down_proj", c.intermediate_size, h, decoder_bits);
  }
  add(t, "model.norm.weight", "BF16", {h}, 2);
  add_linear(t, "lm_head", h, c.vocab_size, head_bits);

  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    std::string shape;
    for (size_t d = 0; d < t[i].shape.size(); ++d) absl::StrAppend(&shape, d == 0 ? "" : ",", t[i].shape[d]);
    absl::StrAppend(&header, i == 0 ? "" : ",", "\"", t[i].name, "\":{\"dtype\":\"", t[i].dtype, "\",\"shape\":[",
                    shape, "],\"data_offsets\":[", offset, ",", offset + t[i].bytes, "]}");
    offset += t[i].bytes;
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  {
    std::ofstream f(path, std::ios::binary);
    uint64_t n = header.size();
    char len[8];
    for (int b = 0; b < 8; ++b) len[b] = static_cast<char>((n >> (8 * b)) & 0xff);
    f.write(len, 8);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
  }
  std::filesystem::resize_file(path, 8 + header.size() + offset);  // a hole: no blocks written
}

class PlannerCacheFit70b : public ::testing::Test {
 protected:
  // One directory per process: ctest runs each test as its own process, possibly in parallel.
  static std::string dir() { return testing::work_path(absl::StrCat("planner-llama-3.1-70b-sparse-", getpid())); }

  static void SetUpTestSuite() {
    write_sparse_model(dir(), testing::llama31_70b_config(), 4, 6);
    auto tensors = SafetensorsCollection::open_dir(dir());
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    auto fp = build_model_footprint(testing::llama31_70b_config(), BackendKind::kCuda, &*tensors);
    ASSERT_TRUE(fp.ok()) << fp.status();
    fp_ = new ModelFootprint(std::move(*fp));
  }
  static void TearDownTestSuite() {
    delete fp_;
    fp_ = nullptr;
    std::filesystem::remove_all(dir());
  }
  void SetUp() override { ASSERT_NE(fp_, nullptr); }

  // What exl3-launch --gpus 0,1 --split A,B --max-seq-len 8192 asks the planner for (max-batch
  // 16, pages of 256, prefill chunk 256).
  static PlannerOptions options(PlanMode mode, const std::vector<double>& caps_gib) {
    PlannerOptions o;
    o.mode = mode;
    for (double g : caps_gib) o.caps.push_back(gib_to_bytes(g));
    o.max_seq_len = 8192;
    o.max_batch = 16;
    o.page_size = 256;
    o.step_tokens = 256;
    return o;
  }

  static ModelFootprint* fp_;
};

ModelFootprint* PlannerCacheFit70b::fp_ = nullptr;

// Every rank: same pages, within its cap, bytes as price_rank re-derives them with those pages.
void check_ranks(const ModelFootprint& fp, const PlannerOptions& o, const std::vector<RankPlan>& plans, int64_t pages) {
  ASSERT_EQ(plans.size(), o.caps.size());
  for (const RankPlan& p : plans) {
    SCOPED_TRACE(::testing::Message() << "rank " << p.rank);
    EXPECT_EQ(p.num_pages, pages);
    EXPECT_EQ(p.page_size, o.page_size);
    EXPECT_LE(p.total_bytes(), o.caps[p.rank]) << format_bytes(p.total_bytes()) << " over " << format_bytes(o.caps[p.rank]);
    const RankBytes b = price_rank(fp, o.with_pages(pages), p);
    EXPECT_EQ(b.weights, p.weight_bytes);
    EXPECT_EQ(b.cache, p.cache_bytes);
    EXPECT_EQ(b.workspace, p.workspace_bytes);
    EXPECT_EQ(b.workspace, rank_reserve_bytes(fp, o.with_pages(pages)));
  }
}

TEST_F(PlannerCacheFit70b, FootprintIsThe70bAt4Bits) {
  EXPECT_DOUBLE_EQ(fp_->decoder_bits, 4.0);
  EXPECT_EQ(fp_->head_bits, 6);
  EXPECT_EQ(fp_->embedding_bytes, 0u) << "the CUDA embedding lives in pinned host memory";
  EXPECT_EQ(fp_->embedding_host_bytes, 2ull * 128256 * 8192);
  // Decoder trellis: 80 layers x (2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672) weights at 4 bits,
  // about 31.9 GiB; with the head and the scales the model is 32-33 GiB on the device.
  const double gib = static_cast<double>(fp_->total_weight_bytes()) / static_cast<double>(kGiB);
  std::printf("70B-shape CUDA weights: %.3f GiB on the device, embedding %.3f GiB in host memory\n", gib,
              static_cast<double>(fp_->embedding_host_bytes) / static_cast<double>(kGiB));
  EXPECT_GT(gib, 32.0);
  EXPECT_LT(gib, 33.5);
  // K and V, 8 KV heads of 128, F16, 80 layers: 320 KiB a token, 2.5 GiB a sequence of 8192.
  EXPECT_EQ(fp_->total_cache_bytes(8192), 80ull * 8 * 128 * 2 * 2 * 8192);
}

// The case: --gpus 0,1 --split 20,24 --max-seq-len 8192 (tp). 16 x 8192 tokens of cache
// (40 GiB) do not fit; the plan keeps the most pages that do, at least one full sequence.
TEST_F(PlannerCacheFit70b, Split20And24FitsFewerPagesThanMaxBatch) {
  const PlannerOptions o = options(PlanMode::kTensorParallel, {20, 24});
  EXPECT_EQ(o.wanted_pages(), 16 * 32);
  EXPECT_FALSE(plan_shards(*fp_, o.with_pages(o.wanted_pages())).ok());
  auto plans = plan_shards(*fp_, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  const int64_t pages = plans->front().num_pages;
  std::printf("fitted %lld pages (%lld tokens)\n", static_cast<long long>(pages), static_cast<long long>(pages * 256));
  EXPECT_GE(pages, 32) << "at least one 8192-token sequence";
  EXPECT_LT(pages, 16 * 32);
  check_ranks(*fp_, o, *plans, pages);
  // The largest count: one page more is refused, naming a rank.
  auto more = plan_shards(*fp_, o.with_pages(pages + 1));
  ASSERT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted) << more.status();
  EXPECT_NE(std::string(more.status().message()).find("rank "), std::string::npos) << more.status();
  // Nearly full: the last page would not fit, so each rank has less than ~one page's cache of room
  // left (a page is 80 MiB over all KV heads) plus one unit of rounding.
  for (const RankPlan& p : *plans) {
    EXPECT_LT(o.caps[p.rank] - p.total_bytes(), uint64_t{200} << 20) << "rank " << p.rank << " left room unused";
  }

  const std::string summary = kv_cache_summary(o, pages);
  EXPECT_EQ(summary, absl::StrCat("KV cache: ", pages, " pages of 256 tokens (", pages * 256,
                                  " tokens) fit, fewer than max-batch 16 x 8192; requests wait for pages"));
  EXPECT_TRUE(cache_was_fitted(o, pages));
  const std::string table = format_plan_table(*fp_, *plans, o.caps, &o);
  std::printf("%s", table.c_str());
  for (const std::string& needle : {summary, std::string("embedding 1.96 GiB in pinned host memory on every rank"),
                                    std::string("NCCL 900.00 MiB"), std::string("CUDA context 600.00 MiB"),
                                    std::string("20.00 GiB"), std::string("24.00 GiB")}) {
    EXPECT_NE(table.find(needle), std::string::npos) << needle << "\n" << table;
  }
}

// The same in layer-split mode: the layers are spread so that the common page count is largest.
TEST_F(PlannerCacheFit70b, LayerSplitFitsFewerPagesToo) {
  const PlannerOptions o = options(PlanMode::kLayers, {20, 24});
  auto plans = plan_shards(*fp_, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  const int64_t pages = plans->front().num_pages;
  EXPECT_GE(pages, 32);
  EXPECT_LT(pages, 16 * 32);
  check_ranks(*fp_, o, *plans, pages);
  EXPECT_EQ(plan_shards(*fp_, o.with_pages(pages + 1)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE((*plans)[0].has_embedding);
  EXPECT_TRUE((*plans)[1].has_head);
}

// Parses every "rank R needs X.YZ GiB|MiB more" into (R, bytes rounded up past the printed rounding).
std::vector<std::pair<int, uint64_t>> shortfalls(const std::string& message) {
  std::vector<std::pair<int, uint64_t>> out;
  const std::regex re("rank (\\d+) needs ([0-9.]+) (GiB|MiB) more");
  for (auto it = std::sregex_iterator(message.begin(), message.end(), re); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const double unit = m[3] == "GiB" ? static_cast<double>(kGiB) : static_cast<double>(kMiB);
    out.push_back({std::stoi(m[1]), static_cast<uint64_t>(std::ceil((std::stod(m[2]) + 0.005) * unit))});
  }
  return out;
}

// --split 16,16: the weights alone (about 32.6 GiB) exceed the caps with the fixed parts; refused
// before loading, naming each rank and how much it lacks for the smallest cache (one sequence).
TEST_F(PlannerCacheFit70b, Split16And16IsRefusedNamingTheRanks) {
  PlannerOptions o = options(PlanMode::kTensorParallel, {16, 16});
  auto plans = plan_shards(*fp_, o);
  ASSERT_EQ(plans.status().code(), absl::StatusCode::kResourceExhausted) << plans.status();
  const std::string msg(plans.status().message());
  std::printf("refusal: %s\n", msg.c_str());
  EXPECT_NE(msg.find("more than its 16.00 GiB cap"), std::string::npos) << msg;
  EXPECT_NE(msg.find("one sequence of --max-seq-len 8192"), std::string::npos) << msg;
  const auto short_by = shortfalls(msg);
  ASSERT_EQ(short_by.size(), 2u) << msg;
  EXPECT_EQ(short_by[0].first, 0);
  EXPECT_EQ(short_by[1].first, 1);
  // The stated amounts are what the ranks lack: with them the plan is made (one sequence or more).
  for (const auto& [rank, amount] : short_by) {
    EXPECT_GT(amount, kGiB) << "rank " << rank;
    o.caps[rank] += amount;
  }
  auto fixed = plan_shards(*fp_, o);
  ASSERT_TRUE(fixed.ok()) << "adding the stated amounts did not help: " << fixed.status();
  EXPECT_GE(fixed->front().num_pages, 32);
  check_ranks(*fp_, o, *fixed, fixed->front().num_pages);

  // Layer split names the rank that is short when the ranks are filled in order.
  auto layers = plan_shards(*fp_, options(PlanMode::kLayers, {16, 16}));
  ASSERT_EQ(layers.status().code(), absl::StatusCode::kResourceExhausted) << layers.status();
  const std::string lmsg(layers.status().message());
  EXPECT_NE(lmsg.find("rank 1 needs"), std::string::npos) << lmsg;
  EXPECT_NE(lmsg.find("more than its 16.00 GiB cap"), std::string::npos) << lmsg;
}

// --cache-tokens: planned exactly (whole pages), refused when too big or below one sequence.
TEST_F(PlannerCacheFit70b, RequestedCacheTokens) {
  PlannerOptions o = options(PlanMode::kTensorParallel, {20, 24});
  o.requested_cache_tokens = 2 * 8192 + 1;  // 65 pages
  auto plans = plan_shards(*fp_, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  check_ranks(*fp_, o, *plans, 65);
  EXPECT_FALSE(cache_was_fitted(o, 65));
  EXPECT_EQ(kv_cache_summary(o, 65), "KV cache: 65 pages of 256 tokens per rank (16640 tokens, as --cache-tokens 16385 asks)");

  o.requested_cache_tokens = 16 * 8192;
  auto big = plan_shards(*fp_, o);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  const std::string msg(big.status().message());
  std::printf("refusal: %s\n", msg.c_str());
  EXPECT_FALSE(shortfalls(msg).empty()) << "no rank named: " << msg;
  EXPECT_NE(msg.find("--cache-tokens 131072"), std::string::npos) << msg;
  EXPECT_NE(msg.find("512 pages of 256 tokens"), std::string::npos) << msg;

  o.requested_cache_tokens = 8192 - 256;  // 31 pages: less than one 8192-token sequence
  auto small = plan_shards(*fp_, o);
  ASSERT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument) << small.status();
  EXPECT_NE(std::string(small.status().message()).find("less than one sequence of --max-seq-len 8192"),
            std::string::npos)
      << small.status();
}

// Generous caps: the full max-batch cache, said as such.
TEST_F(PlannerCacheFit70b, AmpleCapsKeepMaxBatchSequences) {
  const PlannerOptions o = options(PlanMode::kTensorParallel, {60, 60});
  auto plans = plan_shards(*fp_, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  check_ranks(*fp_, o, *plans, 512);
  EXPECT_FALSE(cache_was_fitted(o, 512));
  EXPECT_EQ(kv_cache_summary(o, 512), "KV cache: 512 pages of 256 tokens per rank (131072 tokens: max-batch 16 x 8192)");
}

// The embedding: 0 device bytes on CUDA (whichever rank embeds), fp32 RAM on the CPU worker.
TEST_F(PlannerCacheFit70b, EmbeddingCostsNoDeviceMemoryOnCuda) {
  const PlannerOptions o = options(PlanMode::kLayers, {20, 24});
  auto plans = plan_shards(*fp_, o);
  ASSERT_TRUE(plans.ok()) << plans.status();
  RankPlan with = (*plans)[0], without = (*plans)[0];
  ASSERT_TRUE(with.has_embedding);
  without.has_embedding = false;
  EXPECT_EQ(price_rank(*fp_, o, with).weights, price_rank(*fp_, o, without).weights);

  auto cpu = build_model_footprint(testing::llama31_70b_config(), BackendKind::kCpu);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->embedding_bytes, 4ull * 128256 * 8192);
  EXPECT_EQ(cpu->embedding_host_bytes, 0u);
  EXPECT_EQ(price_rank(*cpu, o, with).weights - price_rank(*cpu, o, without).weights, 4ull * 128256 * 8192);
}

// Calibrated overheads: the context on every CUDA rank, NCCL only in a group.
TEST_F(PlannerCacheFit70b, NcclBuffersOnlyInAGroup) {
  EXPECT_EQ(kCudaOverheads.context_bytes, uint64_t{600} << 20);
  EXPECT_EQ(kCudaOverheads.nccl_bytes, uint64_t{900} << 20);
  const CudaRankReserve one = cuda_plan_reserve(*fp_, options(PlanMode::kTensorParallel, {40}));
  const CudaRankReserve two = cuda_plan_reserve(*fp_, options(PlanMode::kTensorParallel, {20, 24}));
  const CudaRankReserve layers = cuda_plan_reserve(*fp_, options(PlanMode::kLayers, {20, 24}));
  EXPECT_EQ(one.nccl, 0u);
  EXPECT_EQ(two.nccl, uint64_t{900} << 20);
  EXPECT_EQ(layers.nccl, uint64_t{900} << 20);
  for (const CudaRankReserve* r : {&one, &two, &layers}) {
    EXPECT_EQ(r->context, uint64_t{600} << 20);
    EXPECT_EQ(r->outside_allocator(), r->context + r->nccl);
    EXPECT_EQ(r->oneshot, 0u);  // NCCL alone unless the one-shot all-reduce is asked for
  }
}

// --all-reduce oneshot: each rank of a group holds the receive buffer (2 parities x world x
// 2 x max bytes of lines) and the call state, each rounded up to 2 MiB, outside the allocator.
TEST_F(PlannerCacheFit70b, OneshotAllReduceBuffersArePricedInAGroup) {
  EXPECT_EQ(cuda_oneshot_all_reduce_bytes(1, 256 << 10), 0u);
  EXPECT_EQ(cuda_oneshot_all_reduce_bytes(2, 0), 0u);
  EXPECT_EQ(cuda_oneshot_all_reduce_bytes(2, 256 << 10), uint64_t{4} << 20);   // 2 MiB buffer + state
  EXPECT_EQ(cuda_oneshot_all_reduce_bytes(8, 64 << 20), (uint64_t{2} << 30) + (uint64_t{2} << 20));
  PlannerOptions two = options(PlanMode::kTensorParallel, {20, 24});
  const CudaRankReserve nccl = cuda_plan_reserve(*fp_, two);
  two.oneshot_all_reduce_max_bytes = 4 << 20;
  const CudaRankReserve oneshot = cuda_plan_reserve(*fp_, two);
  EXPECT_EQ(oneshot.oneshot, (uint64_t{32} << 20) + (uint64_t{2} << 20));
  EXPECT_EQ(oneshot.total(), nccl.total() + oneshot.oneshot);
  EXPECT_EQ(oneshot.outside_allocator(), oneshot.context + oneshot.nccl + oneshot.oneshot);
  PlannerOptions one = options(PlanMode::kTensorParallel, {40});
  one.oneshot_all_reduce_max_bytes = 4 << 20;
  EXPECT_EQ(cuda_plan_reserve(*fp_, one).oneshot, 0u);
}

}  // namespace
}  // namespace exl3
