// Programmatic dependent launch (sm_90+): a kernel launched with launch_dependent() may start
// while the kernel before it on the stream is still running, once every block of that kernel has
// called allow_dependents() (or exited). It must call wait_for_prerequisites() before it reads
// anything the earlier kernels wrote, or writes anything they read; what it does before (say,
// prefetching weights) overlaps their tail. On older GPUs both calls compile to nothing and the
// launch is an ordinary one. Launches inside a stream capture become programmatic graph edges.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.cuh"

namespace exl3 {

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether the current device runs dependent launches (compute capability 9.0 or newer).
bool dependent_launch_supported();

// kernel<<<grid, block, smem_bytes, stream>>>(args...) as a programmatic dependent launch where
// supported.
template <typename... KernelArgs, typename... Args>
void launch_dependent_smem(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                           cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = dependent_launch_supported() ? 1 : 0;
  EXL3_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// kernel<<<grid, block, 0, stream>>>(args...) as a programmatic dependent launch where supported.
template <typename... KernelArgs, typename... Args>
void launch_dependent(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  launch_dependent_smem(kernel, grid, block, 0, stream, std::forward<Args>(args)...);
}

}  // namespace exl3
