// A Communicator that runs small all-reduces as the one-shot kernel over peer-to-peer memory
// (kernels/cuda/oneshot_all_reduce.h; NVLink on the H200 machines) and hands everything else to
// an inner communicator (NCCL on the same device and stream). GPU workers choose it with
// --all-reduce oneshot; NCCL alone stays the default.
//
// Behaviour of make_p2p_all_reduce_communicator:
// - Set-up: each rank zeroes a receive buffer of oneshot::buffer_bytes(world, max_bytes) bytes on
//   its device and publishes it under "<prefix>/oneshot/<rank>" (host name, process id, device,
//   address and CUDA IPC handle); every rank maps every peer's buffer: by address within one
//   process (enabling peer access between two devices), through cudaIpcOpenMemHandle across
//   processes. Ranks on different hosts, or devices without peer access, give FAILED_PRECONDITION
//   naming the pair. The ranks then agree under "<prefix>/oneshot/<rank>/ready" that everyone
//   mapped everything, so that no kernel runs unless all can; all of it within init_timeout.
// - all_reduce_sum of a CUDA F32/F16/BF16 tensor of at most max_bytes runs the kernel; so does
//   all_reduce_add (residual F32 or the part's dtype, fuses_residual_add says when). Larger or
//   other tensors, and every other collective, go to the inner communicator. The choice depends on
//   dtype and size only, so all ranks make the same one.
// - Sums are oneshot_all_reduce_ref's: fp32 in rank order, so every rank gets the same bits (NCCL
//   may order them otherwise: the two paths can differ in the last bit).
// - Waiting: a call returns once enqueued (or, with wait_each_op, once done); flush() waits for
//   the stream within `timeout` and then for the inner communicator. A peer whose part does not
//   arrive within `timeout` ends the kernel with a wrong output and flush() returns
//   DEADLINE_EXCEEDED naming that rank; after that, or any other failure, every call returns
//   FAILED_PRECONDITION and the group must be torn down.
// - Graph capture: the kernel keeps its call counter on the device, so captured calls replay;
//   supports_graph_capture is the inner communicator's.
// - Destruction: waits for the stream, unmaps the peers' buffers, then frees its own buffer only
//   after a barrier with the peers (freeing one that a peer still maps is undefined); after a
//   failure the buffer is left allocated instead.
// - Not thread-safe; all ranks issue the same collectives in the same order.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/nccl_communicator.h"

namespace exl3 {

struct P2pAllReduceOptions {
  int rank = 0;
  int world_size = 1;  // 1..8
  int device = 0;      // CUDA ordinal of this rank's GPU in this process
  cudaStream_t stream = nullptr;  // the inner communicator's stream
  std::string prefix = "exl3";    // key prefix in the store (one per run of the group)
  // Parts of up to this many bytes go one-shot (8 bytes .. 64 MiB); the buffers hold
  // 4 * world_size times as much.
  int64_t max_bytes = int64_t{256} << 10;
  std::chrono::milliseconds timeout{30000};       // a peer's part, and flush()
  std::chrono::milliseconds init_timeout{60000};  // the whole set-up
  bool wait_each_op = true;  // false: calls return once enqueued and flush() waits (GPU workers)
  // Most blocks of one all-reduce kernel (256 threads each); 0 = the device's SM count.
  int max_blocks = 0;
};

// The options of a P2P communicator over the NCCL communicator made with `nccl`: the same group
// (rank, world size, device, stream, store prefix, timeouts, wait_each_op), parts of up to
// max_bytes one-shot, max_blocks 0.
P2pAllReduceOptions p2p_all_reduce_options_of(const NcclOptions& nccl, int64_t max_bytes);

// Wraps `inner` (rank and world size must match options) after the set-up above.
absl::StatusOr<std::unique_ptr<Communicator>> make_p2p_all_reduce_communicator(const P2pAllReduceOptions& options,
                                                                              std::unique_ptr<Communicator> inner,
                                                                              RendezvousStore& store);

}  // namespace exl3
