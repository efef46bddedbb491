// Copy-bandwidth and GEMM peaks for exl3-bench kernels (see kernel_peaks.h).
#include "bench/kernel_peaks.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#ifdef EXL3_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "bench/bench_cuda.h"
#endif

namespace exl3 {

absl::StatusOr<MeasuredPeaks> measure_cpu_peaks(uint64_t bytes, int iters) {
  if (bytes == 0 || iters < 1) return absl::InvalidArgumentError("copy peak: bytes and iters must be positive");
  std::vector<unsigned char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    src[static_cast<size_t>(i) % bytes] = static_cast<unsigned char>(i);
    std::memcpy(dst.data(), src.data(), bytes);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MeasuredPeaks p;
  p.copy_bytes = bytes;
  p.copy_gb_per_s = 2.0 * static_cast<double>(bytes) * iters / s / 1e9;
  // Reads the destination back so the copies cannot be optimised away.
  volatile unsigned char sink = dst[bytes - 1];
  static_cast<void>(sink);
  return p;
}

#ifdef EXL3_HAVE_CUDA
namespace {

// Frees what it was given on every path (the measurement returns early on errors).
struct CudaScratch {
  std::vector<void*> buffers;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  cublasHandle_t cublas = nullptr;
  ~CudaScratch() {
    if (cublas != nullptr) cublasDestroy(cublas);
    if (begin != nullptr) cudaEventDestroy(begin);
    if (end != nullptr) cudaEventDestroy(end);
    if (stream != nullptr) cudaStreamDestroy(stream);
    for (void* b : buffers) cudaFree(b);
  }
};

absl::Status cublas_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS status ", static_cast<int>(st)));
}

#define EXL3_PEAK_TRY(expr)                      \
  do {                                           \
    absl::Status peak_status_ = (expr);          \
    if (!peak_status_.ok()) return peak_status_; \
  } while (0)

// Mean seconds of `iters` runs of `run` on s.stream after one warm-up, timed with events.
template <typename Run>
absl::StatusOr<double> time_on_stream(CudaScratch& s, int iters, Run run) {
  EXL3_PEAK_TRY(run());
  EXL3_PEAK_TRY(cuda_status(cudaEventRecord(s.begin, s.stream), "cudaEventRecord"));
  for (int i = 0; i < iters; ++i) EXL3_PEAK_TRY(run());
  EXL3_PEAK_TRY(cuda_status(cudaEventRecord(s.end, s.stream), "cudaEventRecord"));
  EXL3_PEAK_TRY(cuda_status(cudaEventSynchronize(s.end), "cudaEventSynchronize"));
  float ms = 0.0f;
  EXL3_PEAK_TRY(cuda_status(cudaEventElapsedTime(&ms, s.begin, s.end), "cudaEventElapsedTime"));
  return static_cast<double>(ms) / 1e3 / iters;
}

}  // namespace

absl::StatusOr<MeasuredPeaks> measure_cuda_peaks(int device, uint64_t bytes, int64_t gemm_n, int iters) {
  if (bytes == 0 || iters < 1 || gemm_n < 1) {
    return absl::InvalidArgumentError("cuda peaks: bytes, gemm size and iters must be positive");
  }
  EXL3_PEAK_TRY(select_cuda_device(device));
  CudaScratch s;
  EXL3_PEAK_TRY(cuda_status(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  EXL3_PEAK_TRY(cuda_status(cudaEventCreate(&s.begin), "cudaEventCreate"));
  EXL3_PEAK_TRY(cuda_status(cudaEventCreate(&s.end), "cudaEventCreate"));

  MeasuredPeaks p;
  p.copy_bytes = bytes;
  void* src = nullptr;
  void* dst = nullptr;
  EXL3_PEAK_TRY(cuda_status(cudaMalloc(&src, bytes), "cudaMalloc (copy source)"));
  s.buffers.push_back(src);
  EXL3_PEAK_TRY(cuda_status(cudaMalloc(&dst, bytes), "cudaMalloc (copy destination)"));
  s.buffers.push_back(dst);
  EXL3_PEAK_TRY(cuda_status(cudaMemsetAsync(src, 0, bytes, s.stream), "cudaMemsetAsync"));
  absl::StatusOr<double> copy_s = time_on_stream(s, iters, [&]() {
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.stream), "cudaMemcpyAsync");
  });
  if (!copy_s.ok()) return copy_s.status();
  p.copy_gb_per_s = 2.0 * static_cast<double>(bytes) / *copy_s / 1e9;
  for (void* b : s.buffers) cudaFree(b);
  s.buffers.clear();

  const size_t n = static_cast<size_t>(gemm_n);
  const size_t matrix_bytes = n * n * sizeof(__half);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  for (void** m : {&a, &b, &c}) {
    EXL3_PEAK_TRY(cuda_status(cudaMalloc(m, matrix_bytes), "cudaMalloc (GEMM operand)"));
    s.buffers.push_back(*m);
    EXL3_PEAK_TRY(cuda_status(cudaMemsetAsync(*m, 0, matrix_bytes, s.stream), "cudaMemsetAsync"));
  }
  EXL3_PEAK_TRY(cublas_status(cublasCreate(&s.cublas), "cublasCreate"));
  EXL3_PEAK_TRY(cublas_status(cublasSetStream(s.cublas, s.stream), "cublasSetStream"));
  const float alpha = 1.0f, beta = 0.0f;
  const int dim = static_cast<int>(gemm_n);
  absl::StatusOr<double> gemm_s = time_on_stream(s, iters, [&]() {
    return cublas_status(
        cublasGemmEx(s.cublas, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &alpha, a, CUDA_R_16F, dim, b, CUDA_R_16F, dim,
                     &beta, c, CUDA_R_16F, dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  });
  if (!gemm_s.ok()) return gemm_s.status();
  p.gemm_n = gemm_n;
  p.gemm_flop_per_s =
      2.0 * static_cast<double>(gemm_n) * static_cast<double>(gemm_n) * static_cast<double>(gemm_n) / *gemm_s;
  return p;
}
#else
absl::StatusOr<MeasuredPeaks> measure_cuda_peaks(int, uint64_t, int64_t, int) {
  return absl::UnimplementedError("this exl3-bench was built without CUDA");
}
#endif

}  // namespace exl3
