// GgufFile: a GGUF v2/v3 file (llama.cpp's model format) parsed from a read-only mapping: header,
// metadata key/values of every GGUF type (nested arrays included), tensor infos, alignment and the
// data section. Every count, length, offset and size is checked against the file size with
// overflow-checked 64-bit arithmetic before it is used (no allocation is sized from the file
// before that check), so a malformed or truncated file gives an error naming the field or tensor,
// never a crash. Tensor bytes are views into the mapping (see gguf_dequant.h to decode them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "import/gguf_types.h"

namespace exl3 {

// One metadata value. Scalars fill the member of their kind. Arrays of scalars keep their items'
// bytes (`raw`, little-endian, gguf_scalar_bytes each) so a large array costs what it costs in the
// file; arrays of strings or arrays hold their items in `items`. item(k) works for both.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  uint64_t u = 0;  // kU8, kU16, kU32, kU64, kBool
  int64_t i = 0;   // kI8, kI16, kI32, kI64
  double f = 0;    // kF32, kF64
  std::string s;   // kString
  GgufValueType elem_type = GgufValueType::kU8;  // kArray
  std::vector<GgufValue> items;                  // kArray of kString or kArray
  std::string raw;                               // kArray of a scalar type

  // Items of an array (0 for a non-array).
  uint64_t size() const;
  // Item k (< size()) of an array, as a value.
  GgufValue item(uint64_t k) const;

  bool is_integer() const;
  bool is_number() const;  // integer or float
  // The value of an integer type when it fits int64_t.
  std::optional<int64_t> as_int() const;
  // The value of any numeric type as a double.
  std::optional<double> as_number() const;
  // "uint32", "array of string", ...
  std::string type_name() const;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) dimension
  uint32_t type = 0;          // GgmlType id (known to ggml_type_traits)
  uint64_t offset = 0;        // from the start of the data section (a multiple of the alignment)
  uint64_t nbytes = 0;
  int64_t numel = 0;
  const uint8_t* data = nullptr;  // into the mapping, nbytes long

  int64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  int64_t rows() const { return row_length() == 0 ? 0 : numel / row_length(); }
  // Row-major shape as Hugging Face writes it: the ggml dims reversed.
  std::vector<int64_t> hf_shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufFile {
 public:
  // Maps and parses `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses `size` bytes at `data`, kept alive by `owner`; `source` names the input in errors.
  static absl::StatusOr<std::unique_ptr<GgufFile>> parse(std::shared_ptr<const void> owner, const uint8_t* data,
                                                        uint64_t size, std::string source);

  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

  // Typed access; a missing key (NOT_FOUND) or a value of another type (INVALID_ARGUMENT) is
  // an error naming the key and the type found.
  absl::StatusOr<std::string> get_string(const std::string& key) const;
  absl::StatusOr<int64_t> get_int(const std::string& key) const;  // any integer type
  absl::StatusOr<double> get_number(const std::string& key) const;  // any numeric type
  absl::StatusOr<bool> get_bool(const std::string& key) const;
  absl::StatusOr<std::vector<std::string>> get_string_array(const std::string& key) const;
  absl::StatusOr<std::vector<int64_t>> get_int_array(const std::string& key) const;
  absl::StatusOr<std::vector<double>> get_number_array(const std::string& key) const;

 private:
  GgufFile() = default;
  absl::Status error(const std::string& what) const;
  absl::StatusOr<const GgufValue*> require(const std::string& key) const;

  std::string source_;
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  friend class GgufParser;
};

}  // namespace exl3
