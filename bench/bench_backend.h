// The backend an exl3-bench mode runs on: the CPU backend, or CUDA on one device (an error saying
// so in a build without CUDA), with the EXL3 matmuls' int8 activations as --int8-activations says.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace exl3 {

// backend: "cpu" or "cuda"; int8_activations: off | auto | on (INVALID_ARGUMENT naming
// --int8-activations otherwise); label: how the CUDA backend names itself in messages (empty: none).
absl::StatusOr<std::shared_ptr<Backend>> make_bench_backend(const std::string& backend, int device,
                                                            const std::string& int8_activations,
                                                            const std::string& label = "");

}  // namespace exl3
