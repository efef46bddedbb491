// CUDA graphs behind Backend::capture_step / replay_step: one stream's work captured once and
// instantiated, then launched as a whole.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace exl3 {

// Captures what `record` queues on `stream` (thread-local capture mode: other threads' CUDA calls
// are unaffected) and instantiates it. When `record` fails, or an op in it cannot be captured, the
// capture is ended and discarded and the status names `label`. `device` must be current.
absl::StatusOr<std::unique_ptr<StepGraph>> capture_cuda_graph(cudaStream_t stream, int device, const std::string& label,
                                                              const std::function<absl::Status()>& record);

// Launches a graph made by capture_cuda_graph on `stream`.
absl::Status launch_cuda_graph(StepGraph& graph, cudaStream_t stream, const std::string& label);

}  // namespace exl3
