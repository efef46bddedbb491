// NCCL backend of the Communicator (GPU workers): its options, its factory, and what it promises
// beyond communicator.h. Failure semantics follow the Gloo backend (gloo_communicator.h).
//
// Behaviour of make_nccl_communicator:
// - Rendezvous: rank 0 makes the NCCL unique id and publishes it under "<prefix>/nccl_id" in the
//   store (served by the coordinator); the other ranks wait for that key. The id exchange, NCCL's
//   own set-up and a warm-up all-reduce of one integer share one deadline, init_timeout from the
//   start of the call; a rank 0 that never publishes gives DEADLINE_EXCEEDED naming the key. Use
//   one prefix per run of a group: a stale id under the same key would join the ranks to a
//   communicator that no longer exists (until init_timeout).
// - The communicator is non-blocking (ncclConfig_t::blocking = 0): no NCCL call blocks the thread
//   without a deadline. Each collective polls ncclCommGetAsyncError until NCCL has enqueued it,
//   then (wait_each_op) polls a CUDA event recorded after it on options.stream, both within
//   options.timeout from the call. A peer that does not take part gives DEADLINE_EXCEEDED; an
//   asynchronous NCCL error (peer gone, network) gives UNAVAILABLE with NCCL's error string; a
//   CUDA error on the stream, or an argument NCCL refuses that our checks let through, gives
//   INTERNAL. Each names the operation, its size and dtype, the peer where there is one, and this
//   rank. After the first such error the communicator is aborted (ncclCommAbort, which also stops
//   this rank's kernels still waiting on peers) and every later call returns FAILED_PRECONDITION;
//   the group must be torn down and made again.
// - Tensors: CUDA tensors in memory of options.device; F32, F16 and BF16 for all_reduce_sum and
//   all_gather, those and I32 for broadcast, send and recv (bytes are moved as they are). Anything
//   else, and arguments wrong on this rank alone (a bad root or peer, all_gather counts that do not
//   add up, send and recv dtypes that differ), give INVALID_ARGUMENT before anything is enqueued,
//   and the communicator stays usable. Mismatches between ranks are contract violations, as for
//   Gloo. The host span calls return UNIMPLEMENTED: host data goes through Gloo.
// - Stream order: every operation is enqueued on options.stream, so it sees the work enqueued
//   there before it. With wait_each_op (the default) a call returns once the operation is complete
//   on the GPU. With wait_each_op = false (what GPU workers use) a call returns once the operation
//   is enqueued and flush() waits for everything enqueued, within `timeout`, once per step: the
//   stream orders the work, asynchronous errors surface at the next call or at flush(), and the
//   same calls can later be captured in a CUDA graph.
// - send() is complete only once the receiver has taken the data (all but small messages), so,
//   as for Gloo, order exchanges (e.g. even ranks send first) or two ranks sending to each other
//   first wait out the timeout.
// - NVLink multicast (NVLS) stays off: the first call in a process sets NCCL_NVLS_ENABLE=0 in the
//   environment when it is unset (NCCL reads it once per process), so workers run with it off by
//   default; a value other than 0 already there is refused unless options.allow_nvls says
//   otherwise (the shared H200 machines must keep it off; see docs/hardware.md).
// - Destruction never throws and is bounded: ncclCommFinalize polled within options.timeout, then
//   ncclCommDestroy; ncclCommAbort instead after an error or when finalizing does not finish.
// - Not thread-safe: one thread drives a communicator, and all ranks issue the same collectives in
//   the same order. Several communicators may live in one process (one per device and thread).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace exl3 {

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;                 // CUDA ordinal, in this process, of this rank's GPU
  cudaStream_t stream = nullptr;  // every operation is enqueued here (a stream of `device`)
  std::string prefix = "exl3";    // key prefix in the store (one per run of the group)
  std::chrono::milliseconds timeout{30000};       // deadline of every operation
  std::chrono::milliseconds init_timeout{60000};  // deadline of rendezvous, init and warm-up
  // True: each call returns once its operation is complete on the GPU. False: once enqueued, and
  // flush() waits (GPU workers: once per step, so a step has no host wait until its end).
  bool wait_each_op = true;
  // Lets an NCCL_NVLS_ENABLE other than 0 in the environment through (off on shared machines).
  bool allow_nvls = false;
};

// Joins the group of options.world_size ranks through `store` (which must outlive the call only)
// and returns this rank's communicator, warmed up by one all-reduce.
absl::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions& options,
                                                                     RendezvousStore& store);

}  // namespace exl3
