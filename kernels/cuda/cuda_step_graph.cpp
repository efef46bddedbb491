// CUDA graph capture and launch for the backend's step graphs.
#include "kernels/cuda/cuda_step_graph.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(int device, cudaGraphExec_t exec) : device_(device), exec_(exec) {}
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;
  ~CudaStepGraph() override {
    int current = -1;
    cudaGetDevice(&current);
    if (current != device_) cudaSetDevice(device_);
    const cudaError_t err = cudaGraphExecDestroy(exec_);
    if (err != cudaSuccess) std::fprintf(stderr, "cudaGraphExecDestroy: %s\n", cudaGetErrorString(err));
    if (current >= 0 && current != device_) cudaSetDevice(current);
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  int device_;
  cudaGraphExec_t exec_;
};

absl::Status graph_error(const std::string& label, const char* call, cudaError_t err) {
  cudaGetLastError();  // not left behind for the next launch check
  return absl::InternalError(absl::StrCat(label, ": ", call, ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StepGraph>> capture_cuda_graph(cudaStream_t stream, int device, const std::string& label,
                                                              const std::function<absl::Status()>& record) {
  cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) return graph_error(label, "cudaStreamBeginCapture", err);
  const absl::Status recorded = record();
  cudaGraph_t graph = nullptr;
  err = cudaStreamEndCapture(stream, &graph);
  if (!recorded.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    return absl::Status(recorded.code(), absl::StrCat(label, ": while capturing a step graph: ", recorded.message()));
  }
  if (err != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return graph_error(label, "cudaStreamEndCapture (an op of the step cannot be captured)", err);
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) return graph_error(label, "cudaGraphInstantiate", err);
  return std::unique_ptr<StepGraph>(new CudaStepGraph(device, exec));
}

absl::Status launch_cuda_graph(StepGraph& graph, cudaStream_t stream, const std::string& label) {
  auto* cuda = dynamic_cast<CudaStepGraph*>(&graph);
  EXL3_CHECK(cuda != nullptr, label, ": replay_step of a graph another backend made");
  const cudaError_t err = cudaGraphLaunch(cuda->exec(), stream);
  if (err != cudaSuccess) return graph_error(label, "cudaGraphLaunch", err);
  return absl::OkStatus();
}

}  // namespace exl3
