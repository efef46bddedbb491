// GPU tests of the one-shot all-reduce kernel (kernels/cuda/oneshot_all_reduce.h) against
// oneshot_all_reduce_ref, bit for bit. The ranks are buffers of one GPU driven from one thread,
// each rank's launch on its own stream so that all of them run at once (they wait for each other
// inside the kernel): the kernel's protocol needs no second GPU to be checked. Also: many calls
// of changing sizes (flags and parities), an unaligned part, calls captured in CUDA graphs and
// replayed, and the deadline when a peer never takes part.
#include "kernels/cuda/oneshot_all_reduce.h"

#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/cuda_test_util.h"
#include "gtest/gtest.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

using testing::CudaTest;
using testing::DeviceBuffer;

constexpr int64_t kMaxBytes = 64 << 10;
constexpr uint64_t kTimeoutNs = 10'000'000'000ull;  // 10 s: never reached when every rank takes part

// Host tensor of `count` values of `dtype`: multiples of 1/64 in [-8, 8), exact in every dtype.
Tensor random_part(DType dtype, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::zeros(dtype, {count});
  for (int64_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(static_cast<int>(rng() % 1024) - 512) / 64.0f;
    if (dtype == DType::kF32) {
      t.mutable_data<float>()[i] = v;
    } else {
      static_cast<uint16_t*>(t.mutable_raw())[i] = dtype == DType::kF16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
    }
  }
  return t;
}

// `world` ranks on the current GPU: a receive buffer, a call state and a stream each.
class RanksOnOneGpu {
 public:
  explicit RanksOnOneGpu(int world) : world_(world) {
    for (int r = 0; r < world; ++r) {
      const auto bytes = static_cast<size_t>(oneshot::buffer_bytes(world, kMaxBytes));
      buffers_.push_back(std::make_unique<DeviceBuffer<uint8_t>>(bytes));
      EXL3_CUDA_CHECK(cudaMemset(buffers_.back()->get(), 0, bytes));
      states_.push_back(std::make_unique<DeviceBuffer<oneshot::State>>(1));
      EXL3_CUDA_CHECK(cudaMemset(states_.back()->get(), 0, sizeof(oneshot::State)));
      cudaStream_t s = nullptr;
      EXL3_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams_.push_back(s);
    }
    EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~RanksOnOneGpu() {
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }

  int world() const { return world_; }
  cudaStream_t stream(int rank) const { return streams_[static_cast<size_t>(rank)]; }
  oneshot::State* state(int rank) const { return states_[static_cast<size_t>(rank)]->get(); }

  OneshotAllReduceParams params(int rank, DType dtype, DType out_dtype, int64_t count, const void* input,
                                void* output, bool accumulate) const {
    OneshotAllReduceParams p;
    p.dtype = dtype;
    p.out_dtype = out_dtype;
    p.count = count;
    p.input = input;
    p.output = output;
    p.accumulate = accumulate;
    p.rank = rank;
    p.world_size = world_;
    for (int r = 0; r < world_; ++r) p.buffers[r] = buffers_[static_cast<size_t>(r)]->get();
    p.slot_lines = oneshot::lines_for(kMaxBytes);
    p.state = state(rank);
    p.timeout_ns = kTimeoutNs;
    p.max_blocks = 8;  // small grids, so that every rank's blocks are resident together
    return p;
  }

 private:
  const int world_;
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> buffers_;
  std::vector<std::unique_ptr<DeviceBuffer<oneshot::State>>> states_;
  std::vector<cudaStream_t> streams_;
};

// One call on every rank: parts[r] summed into outs[r] (in place when outs is empty, else
// accumulated into outs[r]); returns each rank's result as a host tensor.
std::vector<Tensor> all_reduce_once(const RanksOnOneGpu& g, const std::vector<Tensor>& parts,
                                    const std::vector<Tensor>& outs, size_t misalign = 0) {
  const int world = g.world();
  const bool accumulate = !outs.empty();
  const DType dtype = parts[0].dtype();
  const DType out_dtype = accumulate ? outs[0].dtype() : dtype;
  const int64_t count = parts[0].numel();
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> in_dev, out_dev;
  for (int r = 0; r < world; ++r) {
    in_dev.push_back(std::make_unique<DeviceBuffer<uint8_t>>(parts[r].nbytes() + misalign));
    EXL3_CUDA_CHECK(cudaMemcpy(in_dev.back()->get() + misalign, parts[r].raw(), parts[r].nbytes(),
                               cudaMemcpyHostToDevice));
    if (accumulate) {
      out_dev.push_back(std::make_unique<DeviceBuffer<uint8_t>>(outs[r].nbytes()));
      out_dev.back()->upload(outs[r].raw(), outs[r].nbytes());
    }
  }
  for (int r = 0; r < world; ++r) {
    void* in = in_dev[r]->get() + misalign;
    void* out = accumulate ? static_cast<void*>(out_dev[r]->get()) : in;
    launch_oneshot_all_reduce(g.params(r, dtype, out_dtype, count, in, out, accumulate), g.stream(r));
  }
  EXL3_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<Tensor> results;
  for (int r = 0; r < world; ++r) {
    Tensor host = Tensor::zeros(out_dtype, {count});
    const uint8_t* src = accumulate ? out_dev[r]->get() : in_dev[r]->get() + misalign;
    EXL3_CUDA_CHECK(cudaMemcpy(host.mutable_raw(), src, host.nbytes(), cudaMemcpyDeviceToHost));
    results.push_back(std::move(host));
  }
  return results;
}

::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.nbytes() == want.nbytes() && std::memcmp(got.raw(), want.raw(), got.nbytes()) == 0) {
    return ::testing::AssertionSuccess();
  }
  const Tensor g = got.to_f32(), w = want.to_f32();
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (g.data<float>()[i] != w.data<float>()[i]) {
      return ::testing::AssertionFailure() << "element " << i << " of " << g.numel() << ": got " << g.data<float>()[i]
                                           << ", want " << w.data<float>()[i];
    }
  }
  return ::testing::AssertionFailure() << "bits differ (signed zeros or NaN payloads)";
}

class OneshotAllReduceGpu : public CudaTest {};

TEST_F(OneshotAllReduceGpu, MatchesTheReferenceCallAfterCall) {
  uint32_t seed = 1;
  for (int world : {2, 3, 4}) {
    RanksOnOneGpu g(world);
    // Sizes that grow and shrink (stale lines of earlier calls stay in the buffers), odd tails,
    // up to the whole slot; each size in place and accumulated into an F32 residual.
    for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32}) {
      const int64_t full = kMaxBytes / static_cast<int64_t>(dtype_size(dtype));
      for (int64_t count : {int64_t{8192}, int64_t{1}, int64_t{5}, full, int64_t{4099}, int64_t{3}, full - 1}) {
        std::vector<Tensor> parts;
        for (int r = 0; r < world; ++r) parts.push_back(random_part(dtype, count, seed++));
        Tensor want = Tensor::zeros(dtype, {count});
        oneshot_all_reduce_ref(parts, want, false);
        const std::vector<Tensor> got = all_reduce_once(g, parts, {});
        for (int r = 0; r < world; ++r) {
          EXPECT_TRUE(same_bits(got[r], want)) << "world " << world << " rank " << r << " " << dtype_name(dtype)
                                               << " count " << count << " in place";
        }
        std::vector<Tensor> residuals;
        for (int r = 0; r < world; ++r) residuals.push_back(random_part(DType::kF32, count, 1000 + seed));
        Tensor want_acc = random_part(DType::kF32, count, 1000 + seed);
        oneshot_all_reduce_ref(parts, want_acc, true);
        const std::vector<Tensor> got_acc = all_reduce_once(g, parts, residuals);
        for (int r = 0; r < world; ++r) {
          EXPECT_TRUE(same_bits(got_acc[r], want_acc)) << "world " << world << " rank " << r << " "
                                                       << dtype_name(dtype) << " count " << count << " into F32";
        }
      }
    }
  }
}

TEST_F(OneshotAllReduceGpu, TakesAPartThatIsNotEightByteAligned) {
  RanksOnOneGpu g(2);
  const std::vector<Tensor> parts = {random_part(DType::kF16, 37, 5), random_part(DType::kF16, 37, 6)};
  Tensor want = Tensor::zeros(DType::kF16, {37});
  oneshot_all_reduce_ref(parts, want, false);
  const std::vector<Tensor> got = all_reduce_once(g, parts, {}, /*misalign=*/2);
  EXPECT_TRUE(same_bits(got[0], want));
  EXPECT_TRUE(same_bits(got[1], want));
}

TEST_F(OneshotAllReduceGpu, ReplaysInCudaGraphs) {
  const int world = 2;
  const int64_t count = 4096;
  RanksOnOneGpu g(world);
  // Per rank: part A accumulated into an F32 residual, then part B summed in place; both calls
  // captured once in the rank's graph and replayed with fresh inputs.
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> a, b, residual;
  std::vector<cudaGraphExec_t> execs;
  for (int r = 0; r < world; ++r) {
    a.push_back(std::make_unique<DeviceBuffer<uint8_t>>(count * 2));
    b.push_back(std::make_unique<DeviceBuffer<uint8_t>>(count * 2));
    residual.push_back(std::make_unique<DeviceBuffer<uint8_t>>(count * 4));
    cudaGraph_t graph = nullptr;
    EXL3_CUDA_CHECK(cudaStreamBeginCapture(g.stream(r), cudaStreamCaptureModeThreadLocal));
    launch_oneshot_all_reduce(g.params(r, DType::kF16, DType::kF32, count, a[r]->get(), residual[r]->get(), true),
                              g.stream(r));
    launch_oneshot_all_reduce(g.params(r, DType::kF16, DType::kF16, count, b[r]->get(), b[r]->get(), false),
                              g.stream(r));
    EXL3_CUDA_CHECK(cudaStreamEndCapture(g.stream(r), &graph));
    cudaGraphExec_t exec = nullptr;
    EXL3_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    EXL3_CUDA_CHECK(cudaGraphDestroy(graph));
    execs.push_back(exec);
  }
  uint32_t seed = 77;
  for (int replay = 0; replay < 5; ++replay) {
    std::vector<Tensor> pa, pb, res;
    for (int r = 0; r < world; ++r) {
      pa.push_back(random_part(DType::kF16, count, seed++));
      pb.push_back(random_part(DType::kF16, count, seed++));
      res.push_back(random_part(DType::kF32, count, seed));
      a[r]->upload(pa[r].raw(), pa[r].nbytes());
      b[r]->upload(pb[r].raw(), pb[r].nbytes());
      residual[r]->upload(res[r].raw(), res[r].nbytes());
    }
    for (int r = 0; r < world; ++r) EXL3_CUDA_CHECK(cudaGraphLaunch(execs[r], g.stream(r)));
    EXL3_CUDA_CHECK(cudaDeviceSynchronize());
    Tensor want_b = Tensor::zeros(DType::kF16, {count});
    oneshot_all_reduce_ref(pb, want_b, false);
    for (int r = 0; r < world; ++r) {
      Tensor want_res = res[r].clone();  // each rank's own residual plus the sum
      oneshot_all_reduce_ref(pa, want_res, true);
      Tensor got_res = Tensor::zeros(DType::kF32, {count});
      Tensor got_b = Tensor::zeros(DType::kF16, {count});
      residual[r]->download(got_res.mutable_raw(), got_res.nbytes());
      b[r]->download(got_b.mutable_raw(), got_b.nbytes());
      EXPECT_TRUE(same_bits(got_res, want_res)) << "replay " << replay << " rank " << r;
      EXPECT_TRUE(same_bits(got_b, want_b)) << "replay " << replay << " rank " << r;
    }
  }
  for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
}

TEST_F(OneshotAllReduceGpu, GivesUpOnAPeerThatNeverSends) {
  RanksOnOneGpu g(2);
  uint32_t* host_error = nullptr;
  EXL3_CUDA_CHECK(cudaHostAlloc(&host_error, sizeof(uint32_t), cudaHostAllocMapped));
  *host_error = 0;
  uint32_t* host_error_device = nullptr;
  EXL3_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_error_device), host_error, 0));
  DeviceBuffer<uint16_t> part(1024);
  EXL3_CUDA_CHECK(cudaMemset(part.get(), 0, 2048));
  OneshotAllReduceParams p = g.params(0, DType::kF16, DType::kF16, 1024, part.get(), part.get(), false);
  p.timeout_ns = 20'000'000;  // 20 ms
  p.host_error = host_error_device;
  launch_oneshot_all_reduce(p, g.stream(0));  // rank 1 never launches
  EXL3_CUDA_CHECK(cudaStreamSynchronize(g.stream(0)));
  oneshot::State state{};
  EXL3_CUDA_CHECK(cudaMemcpy(&state, g.state(0), sizeof(state), cudaMemcpyDeviceToHost));
  EXPECT_EQ(state.error, 2u);  // 1 + the rank that did not send
  EXPECT_EQ(*host_error, 2u);
  EXPECT_EQ(state.flag, 1u);  // the call still ended (and counted)
  EXPECT_EQ(state.blocks_done, 0u);
  cudaFreeHost(host_error);
}

}  // namespace
}  // namespace exl3
