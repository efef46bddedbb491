// The one-shot all-reduce kernel: every rank writes its part straight into every peer's receive
// buffer as flagged lines (kernels/oneshot_all_reduce_lines.h) and sums what its peers wrote into
// its own, in one launch with no barrier: the small all-reduces of decode (<= 64 KiB a rank on
// the H200 machines) cost one trip over NVLink instead of NCCL's several. The buffers are mapped
// into every rank's address space by the caller (worker/comm/p2p_all_reduce_communicator.h);
// the arithmetic is oneshot_all_reduce_ref's (kernels/ops.h), bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/oneshot_all_reduce_lines.h"
#include "kernels/tensor.h"

namespace exl3 {

struct OneshotAllReduceParams {
  DType dtype = DType::kF16;      // of the parts: F32, F16 or BF16
  DType out_dtype = DType::kF16;  // dtype, or F32
  int64_t count = 0;              // elements of the part (the same on every rank)
  const void* input = nullptr;    // this rank's part (8-byte aligned is faster)
  void* output = nullptr;         // count elements; may be input itself when !accumulate
  bool accumulate = false;        // output += sum (a fused residual add), else output = sum
  int rank = 0;
  int world_size = 1;  // 1..oneshot::kMaxRanks
  // Every rank's receive buffer as this process addresses it (buffers[rank] is this rank's own),
  // each oneshot::buffer_bytes(world_size, slot_lines * 8) bytes, zeroed before the first call.
  void* buffers[oneshot::kMaxRanks] = {};
  int64_t slot_lines = 0;              // oneshot::lines_for(the largest part in bytes)
  oneshot::State* state = nullptr;     // this rank's, device memory, zeroed before the first call
  uint32_t* host_error = nullptr;      // optional: mapped pinned host word that gets state->error too
  uint64_t timeout_ns = 0;             // how long one line may be waited for (> 0)
  int max_blocks = 1;                  // grid cap, e.g. the device's SM count
};

// Enqueues one all-reduce on `stream` (a dependent launch: it waits for the kernels before it).
// Contract (EXL3_CHECK): dtypes and count as above, count * dtype size <= slot_lines * 8, rank
// inside the world, every buffer non-null. A peer whose lines do not come within timeout_ns sets
// state->error and *host_error (1 + that rank) and the call ends with a wrong output; the caller
// reads the error word once the stream is done (the P2P communicator's flush) and tears the group
// down.
void launch_oneshot_all_reduce(const OneshotAllReduceParams& p, cudaStream_t stream);

}  // namespace exl3
