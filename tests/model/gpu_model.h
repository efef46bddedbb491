// A whole model directory loaded on a CUDA backend of its own (default options), for the GPU model
// tests; aborts with the load error.
#pragma once

#include <memory>
#include <string>

#include "kernels/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "worker/model/llama_model.h"

namespace exl3::testing {

inline std::unique_ptr<LlamaModel> load_model_on_gpu(const std::string& dir) {
  auto backend = make_cuda_backend(CudaBackendOptions{});
  EXL3_CHECK_OK(backend.status());
  auto config = load_model_config(dir);
  EXL3_CHECK_OK(config.status());
  auto model = LlamaModel::load_shard(dir, ModelShard::full(*config), std::shared_ptr<Backend>(std::move(*backend)));
  EXL3_CHECK_OK(model.status());
  return *std::move(model);
}

}  // namespace exl3::testing
