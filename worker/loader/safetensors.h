// safetensors reader (mmap, validated header) and writer. A model directory is a collection of
// one or more files, optionally indexed by model.safetensors.index.json.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace exl3 {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

// One mapped .safetensors file. Every header entry is validated on open: known dtype,
// non-negative shape, offsets inside the data section and end - begin == numel * dtype size.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(const std::string& name) const;
  // A read-only view into the mapping (kept alive by the returned tensor).
  absl::StatusOr<Tensor> get(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::shared_ptr<const void> mapping_;  // munmaps when the last view dies
  const uint8_t* data_ = nullptr;        // start of the data section
  uint64_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory: the files listed by model.safetensors.index.json when it
// exists (every listed tensor must be found in its file), else every *.safetensors file.
// A tensor name present in two files is an error.
class SafetensorsCollection {
 public:
  static absl::StatusOr<SafetensorsCollection> open_dir(const std::string& dir);
  static absl::StatusOr<SafetensorsCollection> open_file(const std::string& path);

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo* find(const std::string& name) const;
  absl::StatusOr<Tensor> get(const std::string& name) const;
  // get() plus a dtype and shape check; the error names the tensor and both shapes.
  absl::StatusOr<Tensor> get_checked(const std::string& name, DType dtype, const Shape& shape) const;
  std::vector<std::string> names() const;
  // Name of the file that holds `name` (for error messages).
  std::string file_of(const std::string& name) const;

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;
};

// Writes tensors (any dtype) to one safetensors file, names sorted.
absl::Status write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace exl3
