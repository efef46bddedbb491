// exl3-bench gemv: the EXL3 matmul kernel alone (launch_exl3_gemm: the CUDA-core GEMV for 1..4
// rows, the tensor-core pass above) on random trellis words, swept over K, codebook, matrix shape
// and row count, each timed as the replay of a CUDA graph of back-to-back launches; plus, at 1 row
// and one K, the whole EXL3 linear through the CUDA backend (input and output Hadamard transforms
// included) and an optional correctness check of the timed kernel against the CPU reference on a
// 4096x4096 matrix. Results as JSON and a markdown table. CUDA only: without CUDA the mode says so.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/kernel_peaks.h"
#include "kernels/ops.h"
#include "kernels/tensor.h"
#include "nlohmann/json.hpp"

namespace CLI {
class App;
}  // namespace CLI

namespace exl3 {

struct GemvBenchOptions {
  std::vector<int> bits = {2, 3, 4, 5, 6, 7, 8};
  std::vector<std::string> codebooks = {"mul1", "mcg", "3inst"};
  std::vector<std::string> shapes = {"8192x28672", "28672x8192"};  // k x n: Llama-3.1-70B gate/up, down
  std::vector<int64_t> rows = {1, 2, 4, 8, 16, 32};
  int iters = 50;   // launches captured in one graph (at least enough to rotate over every buffer)
  int repeats = 5;  // timed replays after one warm-up replay
  int device = 0;
  int linear_bits = 4;  // K of the whole-linear rows (through the backend, 1 row)
  bool check = true;    // correctness check on 4096x4096 per (K, codebook, rows)
  bool int8 = true;     // also time the MUL1 linear with int8 activations ("linear-int8" rows)
  uint64_t seed = 1;
  uint64_t copy_bytes = uint64_t{1} << 30;  // size of the copy-peak buffer
  std::vector<std::string> argv;            // the command line, for the report's environment
  std::string json_path;                    // empty: no JSON file
  std::string markdown_path;                // empty: no markdown file
};

// One matrix shape: k inputs (rows of Wq) by n outputs.
struct GemvShape {
  int64_t k = 0, n = 0;
};

// "KxN" strings (e.g. 8192x28672), each k and n a positive multiple of 128 (the kernel's
// contract) and k·n at most 2^34. INVALID_ARGUMENT naming the bad entry.
absl::StatusOr<std::vector<GemvShape>> parse_gemv_shapes(const std::vector<std::string>& shapes);

// mul1 | mcg | 3inst. INVALID_ARGUMENT otherwise.
absl::StatusOr<Codebook> parse_codebook_name(const std::string& name);
const char* codebook_label(Codebook codebook);

// Every option checked (bits 1..8, known codebooks, shapes, rows 1..4096, iters, repeats, seed of
// the check); no device needed.
absl::Status validate_gemv_options(const GemvBenchOptions& options);

struct GemvTiming {
  std::string kind;  // gemm (launch_exl3_gemm alone) | linear (Backend::linear: transforms included)
  int64_t k = 0, n = 0, rows = 0;
  int bits = 0;
  std::string codebook;
  double us = 0.0;      // mean per launch over the timed replays
  double min_us = 0.0;  // fastest replay, per launch
  int launches = 0;     // launches per graph
  int buffers = 0;      // trellis buffers the launches rotate over (L2 never holds the next one)
  double weights() const { return static_cast<double>(k) * static_cast<double>(n); }
  double trellis_bytes() const { return weights() * bits / 8.0; }
  // Weights (k·n) decoded per millisecond, in G (1e9).
  double g_weights_per_ms() const { return weights() / (us / 1e3) / 1e9; }
  // Trellis bytes read per second, GB (1e9).
  double trellis_gb_per_s() const { return trellis_bytes() / (us / 1e6) / 1e9; }
};

// The timed kernel against exl3_decode_ref + a double-precision product on a few 16-column strips.
struct GemvCheck {
  int64_t k = 0, n = 0, rows = 0;
  int bits = 0;
  std::string codebook;
  int64_t columns = 0;         // output columns compared (per row)
  double max_abs_error = 0.0;  // max |gpu - reference|
  double ref_rms = 0.0;        // RMS of the compared reference outputs
  double max_rel_error() const { return ref_rms > 0.0 ? max_abs_error / ref_rms : max_abs_error; }
};

// Compares c (host F32 [rows, n], the kernel's output for a = host F16 [>= rows, k] and the host
// trellis I16 [k/16, n/16, 16·bits]) with a · exl3_decode_ref(trellis) in double precision on 8
// 16-column strips spread from the first to the last (every k tile of each; different column
// blocks of the kernel's grid).
GemvCheck check_gemm_against_reference(const Tensor& trellis, int bits, Codebook codebook, const Tensor& a,
                                       const Tensor& c, int64_t rows);

// Accepted max_rel_error of a check: the few-rows path multiplies by the codebook values before
// their fp16 rounding (exl3_gemv.cu), up to half an fp16 ulp (2^-11) per weight away from the
// reference's rounded weights, which over k = 4096 products leaves the worst of 128 columns near
// 1e-3 of the RMS (measured 1.01e-3 at K=2 MCG); a wrong tile order or decode is off by O(1).
constexpr double kGemvCheckTolerance = 3e-3;

struct GemvBenchReport {
  std::string device_description;
  int l2_bytes = 0;
  MeasuredPeaks peaks;
  std::vector<GemvTiming> timings;
  std::vector<GemvCheck> checks;
  // Weights per millisecond if 4 bpw weights (0.5 byte each) streamed at the measured copy rate.
  double weight_limit_4bpw_per_ms() const { return peaks.copy_gb_per_s * 1e9 / 0.5 / 1e3; }
};

// Runs the sweep on the CUDA device. INVALID_ARGUMENT for bad options, UNIMPLEMENTED in builds
// without CUDA, INTERNAL for CUDA failures. Progress lines go to `progress` (may be null).
absl::StatusOr<GemvBenchReport> run_gemv_bench(const GemvBenchOptions& options, std::FILE* progress);

nlohmann::json gemv_bench_json(const GemvBenchOptions& options, const GemvBenchReport& report);
std::string gemv_bench_markdown(const GemvBenchOptions& options, const GemvBenchReport& report);

// Runs the sweep, prints the markdown on `out`, progress on `progress`, writes the files the
// options name; INTERNAL (after writing them) when a correctness check exceeds its tolerance.
absl::Status run_gemv_bench_command(const GemvBenchOptions& options, std::FILE* out, std::FILE* progress);

// Registers `gemv` on the exl3-bench command line, filling `options` (kept alive by the caller).
void add_gemv_subcommand(CLI::App& app, GemvBenchOptions& options);

}  // namespace exl3
