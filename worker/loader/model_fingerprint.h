// A model directory's fingerprint: the files a worker loads (config.json, the safetensors index,
// every .safetensors file) with each one's size and a hash of what defines it (config.json and the
// index whole, a .safetensors file's header: tensor names, dtypes, shapes and offsets). A worker
// on another host reports its copy's fingerprint; the coordinator refuses one that differs from
// its own, naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace exl3 {

struct ModelFileFingerprint {
  std::string name;    // file name within the model directory
  uint64_t bytes = 0;  // file size
  uint64_t hash = 0;   // FNV-1a 64 of the whole file (JSON) or of the header (.safetensors)
  bool operator==(const ModelFileFingerprint&) const = default;
};

// The fingerprint of `dir`, files sorted by name. INVALID_ARGUMENT naming the file when one cannot
// be read or a .safetensors header is malformed (shorter than its length prefix says).
absl::StatusOr<std::vector<ModelFileFingerprint>> fingerprint_model(const std::string& dir);

// Empty when `copy` equals `reference`; else what differs: the first file missing, extra, or with
// another size or hash.
std::string fingerprint_difference(const std::vector<ModelFileFingerprint>& reference,
                                   const std::vector<ModelFileFingerprint>& copy);

}  // namespace exl3
