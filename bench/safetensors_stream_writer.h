// Writes large safetensors files whose tensor contents are generated, not held in memory: the
// header goes first (every offset follows from the shapes), then a thread pool fills the tensors'
// byte ranges chunk by chunk and pwrite()s them in parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/tensor_fill.h"
#include "kernels/tensor.h"

namespace exl3 {

struct StreamTensor {
  std::string name;
  DType dtype = DType::kF16;
  std::vector<int64_t> shape;  // empty = scalar
  FillSpec fill;

  uint64_t nbytes() const;
};

struct StreamFile {
  std::string path;
  std::vector<StreamTensor> tensors;

  uint64_t data_bytes() const;
};

// Header and data offsets of one file. Tensors whose size is a multiple of 64 bytes come first
// (by name), the rest after them by element size, largest first, then name: with header padding
// to 8 bytes every tensor is aligned to its element size, so a mapped file needs no copies.
struct SafetensorsLayout {
  std::string header;             // the JSON header, space-padded so 8 + size is a multiple of 8
  std::vector<uint64_t> offsets;  // data offset of tensors[i] (relative to the data section)
  uint64_t data_bytes = 0;
  uint64_t file_bytes = 0;        // 8 + header + data
};
SafetensorsLayout plan_safetensors_layout(const std::vector<StreamTensor>& tensors);

// Called on the writing thread about every `progress_interval_s` and once at the end.
using WriteProgressFn = std::function<void(uint64_t bytes_done, uint64_t bytes_total)>;

struct StreamWriteOptions {
  uint64_t seed = 0;
  int threads = 1;
  double progress_interval_s = 1.0;
  WriteProgressFn progress;
};

// Creates (truncates) every file and writes it. Space is reserved up front (fallocate) so a full
// disk fails before any data is written where the filesystem supports it. Errors name the file.
absl::Status write_stream_files(const std::vector<StreamFile>& files, const StreamWriteOptions& options);

}  // namespace exl3
