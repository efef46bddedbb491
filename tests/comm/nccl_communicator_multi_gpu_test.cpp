// Tests of the NCCL communicator: one thread per GPU in this process (each with its own current
// device and stream), rendezvous through an in-process store. Collectives are checked with
// rank-dependent inputs whose sums are exact in every dtype; moves (gather, broadcast, send/recv)
// are checked bit for bit. The failure cases: a silent peer (DEADLINE_EXCEEDED within the
// timeout, then FAILED_PRECONDITION), a missing rank 0, and tensors the backend cannot take.
// Multi-rank cases need two GPUs and skip with a message otherwise; the world-of-one cases run on one.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/rank_threads.h"
#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/fp16.h"
#include "worker/comm/in_memory_store.h"
#include "worker/comm/nccl_communicator.h"

namespace exl3 {
namespace {

using exl3::testing::has_substr;
using exl3::testing::seconds_since;
using exl3::testing::test_prefix;

constexpr std::chrono::milliseconds kTimeout{30000};
// Allowed on top of a deadline: the last poll interval, ncclCommAbort and scheduling noise.
constexpr double kSlackSeconds = 2.0;
// Ranks in the multi-rank cases: every visible GPU, up to 8.
constexpr int kMaxWorld = 8;

using testing::cuda_device_count;

#define EXL3_REQUIRE_GPUS(n)                                                              \
  do {                                                                                    \
    const int exl3_devices_ = cuda_device_count();                                        \
    if (exl3_devices_ < (n)) {                                                            \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, this machine has " << exl3_devices_; \
    }                                                                                     \
  } while (0)

// ---- device buffers as tensors ------------------------------------------------------------------

// A CUDA tensor of `n` elements on the current device, freed with the last reference.
Tensor device_tensor(DType dtype, int64_t n) {
  void* ptr = nullptr;
  EXL3_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(1, static_cast<size_t>(n) * dtype_size(dtype))));
  std::shared_ptr<const void> owner(ptr, [](const void* p) { cudaFree(const_cast<void*>(p)); });
  return Tensor::wrap(Device::kCuda, dtype, {n}, ptr, std::move(owner));
}

void upload(Tensor& t, const std::vector<uint8_t>& bytes, cudaStream_t stream) {
  ASSERT_EQ(bytes.size(), t.nbytes());
  EXL3_CUDA_CHECK(cudaMemcpyAsync(t.mutable_raw(), bytes.data(), bytes.size(),
                                  cudaMemcpyHostToDevice, stream));
  EXL3_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<uint8_t> download(const Tensor& t, cudaStream_t stream) {
  std::vector<uint8_t> bytes(t.nbytes());
  EXL3_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), t.raw(), bytes.size(), cudaMemcpyDeviceToHost,
                                  stream));
  EXL3_CUDA_CHECK(cudaStreamSynchronize(stream));
  return bytes;
}

// ---- values --------------------------------------------------------------------------------------

// Largest integer magnitude below which every integer is exact in `dtype`.
int64_t exact_limit(DType dtype) {
  switch (dtype) {
    case DType::kF32: return int64_t{1} << 24;
    case DType::kF16: return 2048;
    case DType::kBF16: return 256;
    default: return 0;
  }
}

// Element i of rank r's all-reduce input: an integer in [-m/2, m/2) with m = limit / world, so
// every partial sum over the ranks stays within half the exact range, whatever order NCCL adds
// in. Differs between ranks and along i.
int64_t reduce_input(DType dtype, int world, int rank, int64_t i) {
  const int64_t m = exact_limit(dtype) / world;
  return (i * 7919 + rank * 104729 + 13) % m - m / 2;
}

std::vector<uint8_t> encode(DType dtype, const std::vector<int64_t>& values) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = static_cast<float>(values[i]);
    if (dtype == DType::kF32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      const uint16_t h = dtype == DType::kF16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

std::vector<double> decode(DType dtype, const std::vector<uint8_t>& bytes) {
  std::vector<double> values(bytes.size() / dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      float v;
      std::memcpy(&v, &bytes[i * 4], 4);
      values[i] = v;
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      values[i] = dtype == DType::kF16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
    }
  }
  return values;
}

// Pseudo-random bytes for moves, `seed` telling ranks and roots apart. Floating-point elements
// keep the top exponent bit clear, so none is Inf or NaN (a move must not care, but a mismatch
// report should stay readable).
std::vector<uint8_t> pattern(DType dtype, uint32_t seed, int64_t n) {
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * size);
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (int64_t i = 0; i < n; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    uint32_t word = static_cast<uint32_t>(state >> 16);
    if (dtype == DType::kF32) word &= ~(1u << 30);
    if (dtype == DType::kF16 || dtype == DType::kBF16) word &= ~(1u << 14);
    std::memcpy(&bytes[static_cast<size_t>(i) * size], &word, size);
  }
  return bytes;
}

// Compares element by element; on mismatch names the first few elements and the count.
::testing::AssertionResult same_bytes(const std::vector<uint8_t>& want,
                                      const std::vector<uint8_t>& got, size_t element,
                                      const std::string& what) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " bytes, want "
                                         << want.size();
  }
  size_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < want.size() / element; ++i) {
    if (std::memcmp(&want[i * element], &got[i * element], element) == 0) continue;
    if (++mismatches <= 5) {
      uint32_t w = 0;
      uint32_t g = 0;
      std::memcpy(&w, &want[i * element], element);
      std::memcpy(&g, &got[i * element], element);
      absl::StrAppend(&first, " [", i, "] got 0x", absl::Hex(g), " want 0x", absl::Hex(w), ";");
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << mismatches << " of "
                                       << want.size() / element
                                       << " elements differ; first:" << first;
}

// ---- groups --------------------------------------------------------------------------------------

struct RankContext {
  int rank = 0;
  int world = 1;
  cudaStream_t stream = nullptr;
};

NcclOptions nccl_options(int rank, int world, const std::string& prefix, cudaStream_t stream,
                         std::chrono::milliseconds timeout) {
  NcclOptions options;
  options.rank = rank;
  options.world_size = world;
  options.device = rank;
  options.stream = stream;
  options.prefix = prefix;
  options.timeout = timeout;
  return options;
}

// Runs `world` ranks, rank r on GPU r in its own thread with its own stream, and body(comm, ctx)
// on each; returns once every thread is done (GoogleTest records failures from any thread).
void run_ranks(int world, std::chrono::milliseconds timeout,
               const std::function<void(Communicator&, const RankContext&)>& body) {
  InMemoryStore store;
  const std::string prefix = test_prefix();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      EXL3_CUDA_CHECK(cudaSetDevice(rank));
      RankContext ctx{rank, world, nullptr};
      EXL3_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
      {
        auto comm = make_nccl_communicator(nccl_options(rank, world, prefix, ctx.stream, timeout),
                                           store);
        if (comm.ok()) {
          EXPECT_EQ((*comm)->rank(), rank);
          EXPECT_EQ((*comm)->world_size(), world);
          body(**comm, ctx);
        } else {
          ADD_FAILURE() << "rank " << rank << ": " << comm.status();
        }
      }
      EXL3_CUDA_CHECK(cudaStreamDestroy(ctx.stream));
    });
  }
  for (std::thread& t : threads) t.join();
}

int multi_world() { return std::min(cuda_device_count(), kMaxWorld); }

// ---- world of one (one GPU) ---------------------------------------------------------------------

TEST(NcclCommunicator, WorldOfOneRunsEveryOperationOnOneGpu) {
  EXL3_REQUIRE_GPUS(1);
  run_ranks(1, kTimeout, [](Communicator& comm, const RankContext& ctx) {
    const int64_t n = 1000003;
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      std::vector<int64_t> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = reduce_input(dtype, 1, 0, i);
      Tensor t = device_tensor(dtype, n);
      upload(t, encode(dtype, values), ctx.stream);
      ASSERT_TRUE(comm.all_reduce_sum(t).ok());
      EXPECT_TRUE(same_bytes(encode(dtype, values), download(t, ctx.stream), dtype_size(dtype),
                             std::string("all_reduce_sum of one rank, ") + dtype_name(dtype)));
    }

    const std::vector<uint8_t> bytes = pattern(DType::kF16, 7, 5);
    Tensor send = device_tensor(DType::kF16, 5);
    Tensor recv = device_tensor(DType::kF16, 5);
    upload(send, bytes, ctx.stream);
    const std::vector<int64_t> counts{5};
    ASSERT_TRUE(comm.all_gather(send, recv, counts).ok());
    EXPECT_TRUE(same_bytes(bytes, download(recv, ctx.stream), 2, "all_gather of one rank"));

    Tensor ints = device_tensor(DType::kI32, 3);
    EXPECT_TRUE(comm.broadcast(ints, 0).ok());
    EXPECT_TRUE(comm.barrier().ok());
    EXPECT_EQ(comm.broadcast(ints, 1).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.send(ints, 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.recv(ints, 0).code(), absl::StatusCode::kInvalidArgument);
    const std::vector<int64_t> wrong_counts{4};
    EXPECT_EQ(comm.all_gather(send, recv, wrong_counts).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST(NcclCommunicator, RefusesTensorsItCannotTakeAndStaysUsable) {
  EXL3_REQUIRE_GPUS(1);
  run_ranks(1, kTimeout, [](Communicator& comm, const RankContext& ctx) {
    Tensor host = Tensor::zeros(DType::kF32, {7});
    const absl::Status on_host = comm.all_reduce_sum(host);
    EXPECT_EQ(on_host.code(), absl::StatusCode::kInvalidArgument) << on_host;
    EXPECT_TRUE(has_substr(std::string(on_host.message()), "cpu F32")) << on_host;
    EXPECT_EQ(comm.broadcast(host, 0).code(), absl::StatusCode::kInvalidArgument);

    // A host pointer wrapped as a CUDA tensor is caught before NCCL sees it.
    std::vector<float> host_floats(7);
    Tensor disguised = Tensor::wrap(Device::kCuda, DType::kF32, {7}, host_floats.data(),
                                    std::make_shared<int>(0));
    const absl::Status not_device = comm.all_reduce_sum(disguised);
    EXPECT_EQ(not_device.code(), absl::StatusCode::kInvalidArgument) << not_device;

    Tensor bytes = device_tensor(DType::kI8, 7);
    EXPECT_EQ(comm.all_reduce_sum(bytes).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.broadcast(bytes, 0).code(), absl::StatusCode::kInvalidArgument);
    Tensor ints = device_tensor(DType::kI32, 7);
    EXPECT_EQ(comm.all_reduce_sum(ints).code(), absl::StatusCode::kInvalidArgument);
    Tensor undefined;
    EXPECT_EQ(comm.all_reduce_sum(undefined).code(), absl::StatusCode::kInvalidArgument);

    Tensor halves = device_tensor(DType::kF16, 7);
    Tensor floats = device_tensor(DType::kF32, 7);
    const std::vector<int64_t> counts{7};
    EXPECT_EQ(comm.all_gather(halves, floats, counts).code(), absl::StatusCode::kInvalidArgument);

    std::vector<float> span(7);
    const absl::Status spans = comm.all_reduce_sum(std::span<float>(span));
    EXPECT_EQ(spans.code(), absl::StatusCode::kUnimplemented) << spans;
    EXPECT_TRUE(has_substr(std::string(spans.message()), "NCCL")) << spans;

    // None of the refusals touched the communicator.
    upload(floats, encode(DType::kF32, {1, 2, 3, 4, 5, 6, 7}), ctx.stream);
    EXPECT_TRUE(comm.all_reduce_sum(floats).ok());
    EXPECT_TRUE(comm.barrier().ok());
  });
}

TEST(NcclCommunicator, RefusesBadOptions) {
  EXL3_REQUIRE_GPUS(1);
  InMemoryStore store;
  NcclOptions options = nccl_options(0, 1, test_prefix(), nullptr, kTimeout);
  options.rank = 1;
  EXPECT_EQ(make_nccl_communicator(options, store).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  options.device = cuda_device_count();
  EXPECT_EQ(make_nccl_communicator(options, store).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.device = 0;
  options.timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(make_nccl_communicator(options, store).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.timeout = kTimeout;
  options.prefix = "";
  EXPECT_EQ(make_nccl_communicator(options, store).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicator, MissingRankZeroFailsRendezvousWithinTheInitTimeout) {
  EXL3_REQUIRE_GPUS(1);
  InMemoryStore store;
  const std::string prefix = test_prefix();
  NcclOptions options = nccl_options(1, 2, prefix, nullptr, kTimeout);
  options.device = 0;
  options.init_timeout = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  const auto comm = make_nccl_communicator(options, store);
  const double elapsed = seconds_since(start);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_TRUE(has_substr(std::string(comm.status().message()), prefix + "/nccl_id"));
  EXPECT_GE(elapsed, 0.45);
  EXPECT_LE(elapsed, 0.5 + kSlackSeconds);
}

// ---- several ranks --------------------------------------------------------------------------------

TEST(NcclCommunicator, AllReduceSumIsExactForEveryDtypeAndOddSizes) {
  EXL3_REQUIRE_GPUS(2);
  const int world = multi_world();
  run_ranks(world, kTimeout, [](Communicator& comm, const RankContext& ctx) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1000003}}) {
        std::vector<int64_t> mine(n);
        std::vector<int64_t> sums(n, 0);
        for (int64_t i = 0; i < n; ++i) {
          mine[i] = reduce_input(dtype, ctx.world, ctx.rank, i);
          for (int r = 0; r < ctx.world; ++r) sums[i] += reduce_input(dtype, ctx.world, r, i);
        }
        Tensor t = device_tensor(dtype, n);
        upload(t, encode(dtype, mine), ctx.stream);
        const absl::Status status = comm.all_reduce_sum(t);
        ASSERT_TRUE(status.ok()) << status;
        const std::vector<double> got = decode(dtype, download(t, ctx.stream));
        int64_t mismatches = 0;
        double max_error = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double error = std::abs(got[i] - static_cast<double>(sums[i]));
          max_error = std::max(max_error, error);
          if (error != 0 && ++mismatches <= 5) {
            ADD_FAILURE() << "rank " << ctx.rank << " " << dtype_name(dtype) << " n=" << n
                          << " [" << i << "]: got " << got[i] << ", want " << sums[i];
          }
        }
        EXPECT_EQ(mismatches, 0) << "rank " << ctx.rank << " " << dtype_name(dtype) << " n=" << n
                                 << ": max error " << max_error << " (sums must be exact)";
      }
    }
  });
}

TEST(NcclCommunicator, AllGatherConcatenatesUnevenCountsInRankOrder) {
  EXL3_REQUIRE_GPUS(2);
  const int world = multi_world();
  // Uneven (grouped broadcasts), one rank sending nothing, and even (NCCL's all-gather).
  std::vector<std::vector<int64_t>> cases(3, std::vector<int64_t>(world));
  for (int r = 0; r < world; ++r) {
    cases[0][r] = 3 + 100003 * r;
    cases[1][r] = r == world - 1 ? 0 : 5 + r;
    cases[2][r] = 1000003;
  }
  run_ranks(world, kTimeout, [&](Communicator& comm, const RankContext& ctx) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const std::vector<int64_t>& counts : cases) {
        std::vector<uint8_t> want;
        for (int r = 0; r < ctx.world; ++r) {
          const std::vector<uint8_t> part = pattern(dtype, static_cast<uint32_t>(r), counts[r]);
          want.insert(want.end(), part.begin(), part.end());
        }
        int64_t total = 0;
        for (int64_t c : counts) total += c;
        Tensor send = device_tensor(dtype, counts[ctx.rank]);
        upload(send, pattern(dtype, static_cast<uint32_t>(ctx.rank), counts[ctx.rank]),
               ctx.stream);
        Tensor recv = device_tensor(dtype, total);
        upload(recv, pattern(dtype, 1000 + ctx.rank, total), ctx.stream);
        const absl::Status status = comm.all_gather(send, recv, counts);
        ASSERT_TRUE(status.ok()) << status;
        EXPECT_TRUE(same_bytes(want, download(recv, ctx.stream), dtype_size(dtype),
                               "rank " + std::to_string(ctx.rank) + " " + dtype_name(dtype) +
                                   " all_gather of " + std::to_string(total)));
      }
    }
  });
}

TEST(NcclCommunicator, BroadcastFromEveryRoot) {
  EXL3_REQUIRE_GPUS(2);
  const int world = multi_world();
  run_ranks(world, kTimeout, [](Communicator& comm, const RankContext& ctx) {
    for (int root = 0; root < ctx.world; ++root) {
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
        for (int64_t n : {int64_t{3}, int64_t{1000003}}) {
          const std::vector<uint8_t> want = pattern(dtype, 100 + root, n);
          Tensor t = device_tensor(dtype, n);
          upload(t, ctx.rank == root ? want : pattern(dtype, 200 + ctx.rank, n), ctx.stream);
          const absl::Status status = comm.broadcast(t, root);
          ASSERT_TRUE(status.ok()) << status;
          EXPECT_TRUE(same_bytes(want, download(t, ctx.stream), dtype_size(dtype),
                                 "rank " + std::to_string(ctx.rank) + " " + dtype_name(dtype) +
                                     " broadcast from " + std::to_string(root)));
        }
      }
    }
  });
}

TEST(NcclCommunicator, SendRecvAroundARing) {
  EXL3_REQUIRE_GPUS(2);
  const int world = multi_world();
  run_ranks(world, kTimeout, [](Communicator& comm, const RankContext& ctx) {
    const int next = (ctx.rank + 1) % ctx.world;
    const int prev = (ctx.rank + ctx.world - 1) % ctx.world;
    for (DType dtype : {DType::kI32, DType::kF16, DType::kBF16, DType::kF32}) {
      for (int64_t n : {int64_t{3}, int64_t{1000003}}) {
        Tensor out = device_tensor(dtype, n);
        Tensor in = device_tensor(dtype, n);
        upload(out, pattern(dtype, 300 + ctx.rank, n), ctx.stream);
        upload(in, pattern(dtype, 400 + ctx.rank, n), ctx.stream);
        // Sends complete only once received: even ranks send first, odd ranks receive first.
        absl::Status first;
        absl::Status second;
        if (ctx.rank % 2 == 0) {
          first = comm.send(out, next);
          second = comm.recv(in, prev);
        } else {
          first = comm.recv(in, prev);
          second = comm.send(out, next);
        }
        ASSERT_TRUE(first.ok()) << first;
        ASSERT_TRUE(second.ok()) << second;
        EXPECT_TRUE(same_bytes(pattern(dtype, 300 + prev, n), download(in, ctx.stream),
                               dtype_size(dtype),
                               "rank " + std::to_string(ctx.rank) + " " + dtype_name(dtype) +
                                   " recv of " + std::to_string(n) + " from " +
                                   std::to_string(prev)));
      }
    }
  });
}

TEST(NcclCommunicator, BarrierWaitsForTheLastRank) {
  EXL3_REQUIRE_GPUS(2);
  const int world = multi_world();
  run_ranks(world, kTimeout, [](Communicator& comm, const RankContext& ctx) {
    // Every rank leaves the warm-up all-reduce at about the same time; the last one then dawdles.
    if (ctx.rank == ctx.world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = comm.barrier();
    const double elapsed = seconds_since(start);
    ASSERT_TRUE(status.ok()) << status;
    if (ctx.rank == 0) {
      EXPECT_GE(elapsed, 0.4) << "rank 0 left the barrier early";
    }
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(comm.barrier().ok());
  });
}

TEST(NcclCommunicator, SilentPeerGivesDeadlineExceededThenFailedPrecondition) {
  EXL3_REQUIRE_GPUS(2);
  const std::chrono::milliseconds timeout{2000};
  const double timeout_s = 2.0;
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_done_future = rank0_done.get_future().share();
  run_ranks(2, timeout, [&](Communicator& comm, const RankContext& ctx) {
    if (ctx.rank == 1) {
      // Alive, but never takes part; lets go of its communicator only once rank 0 has given up.
      ASSERT_EQ(rank0_done_future.wait_for(std::chrono::seconds(60)), std::future_status::ready);
      return;
    }
    Tensor t = device_tensor(DType::kF32, 1000);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = comm.all_reduce_sum(t);
    const double elapsed = seconds_since(start);
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_TRUE(has_substr(std::string(status.message()), "all_reduce_sum")) << status;
    EXPECT_TRUE(has_substr(std::string(status.message()), "rank 0 of 2")) << status;
    EXPECT_GE(elapsed, timeout_s * 0.95);
    EXPECT_LE(elapsed, timeout_s + kSlackSeconds) << status;

    for (const absl::Status& later :
         {comm.all_reduce_sum(t), comm.barrier(), comm.broadcast(t, 1), comm.send(t, 1)}) {
      EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
      EXPECT_TRUE(has_substr(std::string(later.message()), "all_reduce_sum")) << later;
    }
    rank0_done.set_value();
  });
}

TEST(NcclCommunicator, TeardownAfterAPeerAbortedIsBounded) {
  EXL3_REQUIRE_GPUS(2);
  const std::chrono::milliseconds timeout{1500};
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_done_future = rank0_done.get_future().share();
  std::vector<double> teardown(2, 0.0);
  InMemoryStore store;
  const std::string prefix = test_prefix();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      EXL3_CUDA_CHECK(cudaSetDevice(rank));
      cudaStream_t stream = nullptr;
      EXL3_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      auto comm = make_nccl_communicator(nccl_options(rank, 2, prefix, stream, timeout), store);
      ASSERT_TRUE(comm.ok()) << comm.status();
      if (rank == 0) {
        Tensor t = device_tensor(DType::kBF16, 4097);
        EXPECT_EQ((*comm)->all_reduce_sum(t).code(), absl::StatusCode::kDeadlineExceeded);
        rank0_done.set_value();
      } else {
        ASSERT_EQ(rank0_done_future.wait_for(std::chrono::seconds(60)), std::future_status::ready);
      }
      const auto start = std::chrono::steady_clock::now();
      comm->reset();
      teardown[rank] = seconds_since(start);
      EXL3_CUDA_CHECK(cudaStreamDestroy(stream));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_LE(teardown[rank], 1.5 + kSlackSeconds) << "rank " << rank << " teardown";
  }
}

}  // namespace
}  // namespace exl3
