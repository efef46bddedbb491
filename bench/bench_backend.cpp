// make_bench_backend: the CPU backend, or the CUDA backend where the build has one.
#include "bench/bench_backend.h"

#include "kernels/int8_activations.h"

#ifdef EXL3_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace exl3 {

absl::StatusOr<std::shared_ptr<Backend>> make_bench_backend(const std::string& backend, int device,
                                                            const std::string& int8_activations,
                                                            const std::string& label) {
  EXL3_ASSIGN_OR_RETURN(const Int8Activations int8, parse_int8_activations(int8_activations, "--int8-activations"));
  if (backend == "cpu") {
    CpuBackendOptions cpu;
    cpu.int8_activations = int8;
    return std::shared_ptr<Backend>(make_cpu_backend(cpu));
  }
#ifdef EXL3_HAVE_CUDA
  CudaBackendOptions cuda;
  cuda.device = device;
  cuda.int8_activations = int8;
  if (!label.empty()) cuda.label = label;
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<Backend> made, make_cuda_backend(cuda));
  return std::shared_ptr<Backend>(std::move(made));
#else
  (void)device;
  (void)label;
  return absl::UnimplementedError(
      "--backend cuda: this exl3-bench was built without CUDA (configure with -DEXL3_CUDA=ON)");
#endif
}

}  // namespace exl3
