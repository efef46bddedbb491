// The one-shot all-reduce on the CPU: its reference against hand-computed sums (rank order, one
// rounding), and its wire format (kernels/oneshot_all_reduce_lines.h) run by threads as ranks
// over shared buffers of 64-bit atomic words, call after call with changing sizes, so that the
// parity and flag rules are shown to hand every rank exactly its peers' parts.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/fp16.h"
#include "kernels/oneshot_all_reduce_lines.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

Tensor f16_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::zeros(DType::kF16, {static_cast<int64_t>(values.size())});
  auto* bits = static_cast<uint16_t*>(t.mutable_raw());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_half_bits(values[i]);
  return t;
}

float f16_at(const Tensor& t, int64_t i) { return half_bits_to_float(static_cast<const uint16_t*>(t.raw())[i]); }

TEST(OneshotAllReduceRef, SumsF32InRankOrder) {
  // 1e8 + 1 - 1e8 in rank order is 0 in fp32 (1e8 + 1 rounds to 1e8); another order would give 1.
  const std::vector<Tensor> parts = {Tensor::from_vector<float>({1e8f, 2.0f}, {2}),
                                     Tensor::from_vector<float>({1.0f, 3.0f}, {2}),
                                     Tensor::from_vector<float>({-1e8f, -0.5f}, {2})};
  Tensor out = Tensor::zeros(DType::kF32, {2});
  oneshot_all_reduce_ref(parts, out, /*accumulate=*/false);
  EXPECT_EQ(out.data<float>()[0], 0.0f);
  EXPECT_EQ(out.data<float>()[1], 4.5f);
}

TEST(OneshotAllReduceRef, F16PartsRoundOnceIntoF16) {
  // 1024 + 0.5 + 0.5 = 1025 in fp32; f16 (spacing 1 at 1024) rounding after each add would give
  // 1024 (1024.5 ties to even, twice).
  const std::vector<Tensor> parts = {f16_tensor({1024.0f, 7.0f}), f16_tensor({0.5f, -3.0f}), f16_tensor({0.5f, 0.0f})};
  Tensor out = Tensor::zeros(DType::kF16, {2});
  oneshot_all_reduce_ref(parts, out, /*accumulate=*/false);
  EXPECT_EQ(f16_at(out, 0), 1025.0f);
  EXPECT_EQ(f16_at(out, 1), 4.0f);
}

TEST(OneshotAllReduceRef, AccumulatesIntoAnF32Residual) {
  const std::vector<Tensor> parts = {f16_tensor({1.5f, -2.0f, 0.125f}), f16_tensor({2.5f, 0.5f, 0.125f})};
  Tensor residual = Tensor::from_vector<float>({10.0f, 1.0f, -0.25f}, {3});
  oneshot_all_reduce_ref(parts, residual, /*accumulate=*/true);
  EXPECT_EQ(residual.data<float>()[0], 14.0f);
  EXPECT_EQ(residual.data<float>()[1], -0.5f);
  EXPECT_EQ(residual.data<float>()[2], 0.0f);
}

TEST(OneshotAllReduceRef, Bf16Parts) {
  Tensor a = Tensor::zeros(DType::kBF16, {1});
  Tensor b = Tensor::zeros(DType::kBF16, {1});
  static_cast<uint16_t*>(a.mutable_raw())[0] = float_to_bf16_bits(256.0f);
  static_cast<uint16_t*>(b.mutable_raw())[0] = float_to_bf16_bits(3.0f);
  const std::vector<Tensor> parts = {a, b};
  Tensor out = Tensor::zeros(DType::kBF16, {1});
  oneshot_all_reduce_ref(parts, out, /*accumulate=*/false);
  // 259 lies between the bf16 neighbours 258 and 260 (spacing 2): ties go to even, 260.
  EXPECT_EQ(bf16_bits_to_float(static_cast<const uint16_t*>(out.raw())[0]), 260.0f);
}

// ---- the wire format --------------------------------------------------------------------------

TEST(OneshotLines, LayoutAndFlags) {
  EXPECT_EQ(oneshot::lines_for(0), 0);
  EXPECT_EQ(oneshot::lines_for(1), 1);
  EXPECT_EQ(oneshot::lines_for(16384), 2048);
  EXPECT_EQ(oneshot::buffer_bytes(2, 16384), 2 * 2 * 2048 * 16);
  // Slots: parity-major, then source rank, then line.
  EXPECT_EQ(oneshot::line_offset(/*flag=*/2, 3, 0, 100, 5), 5);
  EXPECT_EQ(oneshot::line_offset(/*flag=*/3, 3, 0, 100, 5), 305);
  EXPECT_EQ(oneshot::line_offset(/*flag=*/3, 3, 2, 100, 5), 505);
  const uint64_t w = oneshot::pack_word(0xdeadbeefu, 7u);
  EXPECT_EQ(oneshot::word_payload(w), 0xdeadbeefu);
  EXPECT_EQ(oneshot::word_flag(w), 7u);
  EXPECT_TRUE(oneshot::line_arrived(w, oneshot::pack_word(1u, 7u), 7u));
  // A line of the call two before (same parity) or half written is not this call's.
  EXPECT_FALSE(oneshot::line_arrived(oneshot::pack_word(1u, 5u), oneshot::pack_word(1u, 5u), 7u));
  EXPECT_FALSE(oneshot::line_arrived(w, oneshot::pack_word(1u, 5u), 7u));
  // The flag wraps to 0 and the parity keeps alternating; a zeroed buffer never matches the first
  // call (flag 1), and after the wrap stale lines carry 0xfffffffe, not 0.
  EXPECT_EQ(oneshot::next_flag(0xffffffffu), 0u);
  EXPECT_NE(oneshot::line_offset(0xffffffffu, 2, 1, 10, 0), oneshot::line_offset(0u, 2, 1, 10, 0));
  EXPECT_FALSE(oneshot::line_arrived(0, 0, oneshot::next_flag(0u)));
}

// A line's payload is its own 8 bytes of the part, at every alignment and in the last, partial
// line: never a byte of the next line (the kernel's unaligned path once OR-ed every later byte in).
TEST(OneshotLines, PayloadIsTheLinesOwnBytesAtAnyAlignment) {
  std::vector<uint8_t> buffer(64);
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<uint8_t>(0x11 * (i % 15) + 1);
  for (int64_t offset : {0, 1, 2, 3, 5, 7}) {
    for (int64_t bytes : {1, 3, 7, 8, 9, 16, 37, 50}) {
      const uint8_t* part = buffer.data() + offset;
      for (int64_t l = 0; l < oneshot::lines_for(bytes); ++l) {
        uint32_t want[2] = {0, 0};
        std::memcpy(want, part + l * 8, static_cast<size_t>(std::min<int64_t>(8, bytes - l * 8)));
        const oneshot::LinePayload got = oneshot::line_payload_bytewise(part, bytes, l);
        EXPECT_EQ(got.word0, want[0]) << "offset " << offset << " bytes " << bytes << " line " << l;
        EXPECT_EQ(got.word1, want[1]) << "offset " << offset << " bytes " << bytes << " line " << l;
      }
    }
  }
}

// W ranks as threads, each with a receive buffer of atomic words; a rank sends every line of its
// part to every peer, then collects its peers' lines and checks they rebuild the peers' parts.
class LineProtocolRun {
 public:
  LineProtocolRun(int world, int64_t max_bytes) : world_(world), max_bytes_(max_bytes) {
    const int64_t words = oneshot::buffer_bytes(world, max_bytes) / 8;
    for (int r = 0; r < world; ++r) buffers_.emplace_back(static_cast<size_t>(words));
    for (auto& b : buffers_) {
      for (auto& w : b) w.store(0, std::memory_order_relaxed);
    }
  }

  // The part rank `rank` sends in call `call`: `bytes` deterministic bytes.
  static std::vector<uint8_t> part(int rank, int call, int64_t bytes) {
    std::vector<uint8_t> p(static_cast<size_t>(bytes));
    for (int64_t i = 0; i < bytes; ++i) p[static_cast<size_t>(i)] = static_cast<uint8_t>(rank * 31 + call * 7 + i * 13);
    return p;
  }

  // Runs `sizes.size()` calls on rank `rank`; returns the number of lines that did not rebuild
  // their sender's part (0 when the protocol holds), or -1 on a timeout.
  int64_t run_rank(int rank, const std::vector<int64_t>& sizes, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t slot_lines = oneshot::lines_for(max_bytes_);
    uint32_t flag = 0;
    int64_t wrong = 0;
    for (size_t call = 0; call < sizes.size(); ++call) {
      flag = oneshot::next_flag(flag);
      const int64_t bytes = sizes[call];
      const std::vector<uint8_t> mine = part(rank, static_cast<int>(call), bytes);
      const int64_t lines = oneshot::lines_for(bytes);
      for (int64_t l = 0; l < lines; ++l) {
        const oneshot::LinePayload payload = oneshot::line_payload_bytewise(mine.data(), bytes, l);
        for (int peer = 0; peer < world_; ++peer) {
          if (peer == rank) continue;
          const int64_t at = 2 * oneshot::line_offset(flag, world_, rank, slot_lines, l);
          buffers_[static_cast<size_t>(peer)][static_cast<size_t>(at)].store(oneshot::pack_word(payload.word0, flag),
                                                                             std::memory_order_relaxed);
          buffers_[static_cast<size_t>(peer)][static_cast<size_t>(at + 1)].store(
              oneshot::pack_word(payload.word1, flag), std::memory_order_relaxed);
        }
        if (rng() % 64 == 0) std::this_thread::yield();  // let the ranks drift apart
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      auto& own = buffers_[static_cast<size_t>(rank)];
      for (int source = 0; source < world_; ++source) {
        if (source == rank) continue;
        const std::vector<uint8_t> want = part(source, static_cast<int>(call), bytes);
        for (int64_t l = 0; l < lines; ++l) {
          const int64_t at = 2 * oneshot::line_offset(flag, world_, source, slot_lines, l);
          uint64_t w0 = 0, w1 = 0;
          while (true) {
            w0 = own[static_cast<size_t>(at)].load(std::memory_order_relaxed);
            w1 = own[static_cast<size_t>(at + 1)].load(std::memory_order_relaxed);
            if (oneshot::line_arrived(w0, w1, flag)) break;
            if (std::chrono::steady_clock::now() > deadline) return -1;
            std::this_thread::yield();
          }
          const uint32_t words[2] = {oneshot::word_payload(w0), oneshot::word_payload(w1)};
          const auto n = static_cast<size_t>(std::min<int64_t>(8, bytes - l * 8));
          if (std::memcmp(words, want.data() + l * 8, n) != 0) ++wrong;
        }
      }
    }
    return wrong;
  }

 private:
  const int world_;
  const int64_t max_bytes_;
  std::vector<std::vector<std::atomic<uint64_t>>> buffers_;
};

TEST(OneshotLines, ThreadsAsRanksGetEveryPeersPartCallAfterCall) {
  for (int world : {2, 3, 4}) {
    const int64_t max_bytes = 4096;
    // Sizes that grow and shrink, with odd tails, so stale lines of earlier calls stay behind.
    std::vector<int64_t> sizes;
    std::mt19937 rng(1234 + world);
    for (int call = 0; call < 300; ++call) sizes.push_back(1 + static_cast<int64_t>(rng() % max_bytes));
    LineProtocolRun run(world, max_bytes);
    std::vector<int64_t> wrong(static_cast<size_t>(world), 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] { wrong[static_cast<size_t>(r)] = run.run_rank(r, sizes, 99u + r); });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << "world " << world << " rank " << r << " (-1: timed out)";
    }
  }
}

}  // namespace
}  // namespace exl3
