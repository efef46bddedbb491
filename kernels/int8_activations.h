// Int8 activations for the few-rows EXL3 matmul: when they apply, and the quantization both
// backends use (the spec is kernels/ref/int8_activations_ref.cpp; the CUDA kernel that exploits it
// is kernels/cuda/exl3_gemv_int8.cu).
//
// At batch 1 an H200 decodes EXL3 weights slower than it reads them (../shared/docs/hardware.md).
// With the activations in int8, a MUL1 weight's code bytes go straight into an int8 tensor-core
// product (value = KINV·(1024 + byte sum of s·0x83DCD12D) + KBIAS, so Σ value·x needs only the
// byte sums against x), which removes most of the per-weight work. The price is the activation
// rounding: each row's transformed input a (the fp16 GEMM input, after suh and the Hadamard) is
// quantized per aligned block of 128 inputs to q = round(a · 127 / amax) in -127..127 with scale
// amax / 127, and the matmul sees q · scale instead of a (about 0.6% relative error on a Gaussian
// block; the 4-bit weights themselves are ~13% off). ExLlamaV3 makes the same trade by default.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/ops.h"

namespace exl3 {

enum class Int8Activations : uint8_t {
  kOff = 0,   // every matmul sees the fp16 activations
  kAuto = 1,  // int8 where it applies and the weights are at most kInt8AutoMaxBits wide
  kOn = 2,    // int8 wherever it applies
};

// The rows a matmul may have for int8 activations to apply. The CUDA kernel takes up to 32, but on
// an H200 it is slower than the fp16 path past 8 rows even with its input quantized once per
// matmul (exl3_gemv_stage_int8.cu): each tile's products grow with the rows, and the int8 ones do
// 4 multiply-adds per weight (the state's 4 bytes) where fp16 does one. The 8B's 4096x28672 at 32
// rows: 67.9 us with int8, 59.9 with fp16; 8B decode batch 32: 5,265 vs 6,044 tokens/s, batch 16
// 3,678 vs 3,846 (bench/results/2026-12-05-s11-h200 run 1). Up to 8 rows int8 is faster (batch 8:
// 2,298 vs 1,966).
constexpr int64_t kInt8ActivationsMaxRows = 8;
// Under kAuto: wider weights are accurate enough that the activation rounding would dominate.
constexpr int kInt8AutoMaxBits = 6;
// Inputs per quantization block (the Hadamard block).
constexpr int64_t kInt8ActivationBlock = 128;

// Whether an EXL3 matmul of `rows` rows with these weights uses int8 activations: MUL1 weights,
// 1 <= rows <= kInt8ActivationsMaxRows, and the mode allows the width. The one rule both backends
// follow, so that a CPU worker and a CUDA worker compute the same thing.
constexpr bool use_int8_activations(Int8Activations mode, int bits, Codebook codebook, int64_t rows) {
  if (mode == Int8Activations::kOff || codebook != Codebook::kMul1) return false;
  if (rows < 1 || rows > kInt8ActivationsMaxRows) return false;
  return mode == Int8Activations::kOn || bits <= kInt8AutoMaxBits;
}

// "off", "auto", "on".
std::string int8_activations_name(Int8Activations mode);
// Parses "off" / "auto" / "on"; INVALID_ARGUMENT naming `flag` and the text otherwise.
absl::StatusOr<Int8Activations> parse_int8_activations(const std::string& text, const std::string& flag);
// Help text of the --int8-activations flag every binary that builds a backend shares.
std::string int8_activations_flag_help();

}  // namespace exl3
