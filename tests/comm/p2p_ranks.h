// Test helpers for the P2P all-reduce communicator: ranks as threads of this process, each on
// its own stream and a device of the caller's choice, its inner communicator made by the caller
// (Gloo on one GPU, NCCL on several), and device tensors filled from and read into host tensors.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_check.cuh"
#include "worker/comm/in_memory_store.h"
#include "worker/comm/p2p_all_reduce_communicator.h"

namespace exl3::testing {

// A CUDA tensor on the current device holding a copy of host tensor `host`.
inline Tensor to_device(const Tensor& host) {
  void* ptr = nullptr;
  EXL3_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(1, host.nbytes())));
  EXL3_CUDA_CHECK(cudaMemcpy(ptr, host.raw(), host.nbytes(), cudaMemcpyHostToDevice));
  std::shared_ptr<const void> owner(ptr, [](const void* p) { cudaFree(const_cast<void*>(p)); });
  return Tensor::wrap(Device::kCuda, host.dtype(), host.shape(), ptr, std::move(owner));
}

// Host copy of a CUDA tensor, after `stream` is done.
inline Tensor to_host(const Tensor& device, cudaStream_t stream) {
  EXL3_CUDA_CHECK(cudaStreamSynchronize(stream));
  Tensor host = Tensor::zeros(device.dtype(), device.shape());
  EXL3_CUDA_CHECK(cudaMemcpy(host.mutable_raw(), device.raw(), host.nbytes(), cudaMemcpyDeviceToHost));
  return host;
}

struct P2pRank {
  int rank = 0;
  int device = 0;
  cudaStream_t stream = nullptr;
};

using InnerFactory = std::function<std::unique_ptr<Communicator>(const P2pRank&, RendezvousStore&)>;

// Runs `world` ranks (rank r on device device_of(r)), each with a P2P communicator made from
// `options` (rank, world, device and stream filled in) over inner(rank), and body on each.
inline void run_p2p_ranks(int world, const std::function<int(int)>& device_of, const P2pAllReduceOptions& options,
                          const InnerFactory& inner,
                          const std::function<void(Communicator&, const P2pRank&)>& body) {
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      P2pRank ctx{rank, device_of(rank), nullptr};
      EXL3_CUDA_CHECK(cudaSetDevice(ctx.device));
      EXL3_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
      {
        std::unique_ptr<Communicator> in = inner(ctx, store);
        if (in == nullptr) {
          ADD_FAILURE() << "rank " << rank << ": no inner communicator";
        } else {
          P2pAllReduceOptions o = options;
          o.rank = rank;
          o.world_size = world;
          o.device = ctx.device;
          o.stream = ctx.stream;
          auto comm = make_p2p_all_reduce_communicator(o, std::move(in), store);
          if (comm.ok()) {
            body(**comm, ctx);
          } else {
            ADD_FAILURE() << "rank " << rank << ": " << comm.status();
          }
        }
      }
      EXL3_CUDA_CHECK(cudaStreamDestroy(ctx.stream));
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace exl3::testing
