// Helpers of the GGUF import tests: a GGUF byte builder that records where each field lies (so
// tests can corrupt one field at a time), parsing from an exact-size heap copy (so AddressSanitizer
// sees any read past the end), and FNV-1a 64 of a tensor's bytes (the fixtures' checksums).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "import/gguf_reader.h"

namespace exl3::testing {

class GgufBuilder {
 public:
  struct TensorPos {
    size_t name_length = 0, n_dims = 0, first_dim = 0, type = 0, offset = 0;
  };
  struct Built {
    std::string bytes;
    std::vector<size_t> kv_key_length;      // position of each key/value pair's key length
    std::vector<size_t> kv_type;            // ... and of its value type
    std::vector<TensorPos> tensors;
    size_t tensor_infos_end = 0;            // end of the tensor infos (before alignment padding)
    uint64_t data_offset = 0;
  };

  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  // A key/value whose value bytes (after the type) are `payload`.
  void kv(const std::string& key, uint32_t type, const std::string& payload) { kvs_.push_back({key, type, payload}); }
  void kv_u32(const std::string& key, uint32_t v) { kv(key, 4, pod(v)); }
  void kv_i32(const std::string& key, int32_t v) { kv(key, 5, pod(v)); }
  void kv_f32(const std::string& key, float v) { kv(key, 6, pod(v)); }
  void kv_bool(const std::string& key, bool v) { kv(key, 7, std::string(1, v ? 1 : 0)); }
  void kv_string(const std::string& key, const std::string& v) { kv(key, 8, str(v)); }
  void kv_string_array(const std::string& key, const std::vector<std::string>& v) {
    std::string p = pod(uint32_t{8}) + pod(static_cast<uint64_t>(v.size()));
    for (const std::string& s : v) p += str(s);
    kv(key, 9, p);
  }
  void kv_i32_array(const std::string& key, const std::vector<int32_t>& v) {
    std::string p = pod(uint32_t{5}) + pod(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) p += pod(x);
    kv(key, 9, p);
  }
  // A tensor with ggml dims `dims` and its raw bytes.
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, std::string data) {
    tensors_.push_back({name, std::move(dims), type, std::move(data)});
  }

  Built build(uint64_t alignment = 32) const {
    Built b;
    std::string& o = b.bytes;
    o += "GGUF";
    o += pod(version_);
    o += pod(static_cast<uint64_t>(tensors_.size()));
    o += pod(static_cast<uint64_t>(kvs_.size()));
    for (const Kv& k : kvs_) {
      b.kv_key_length.push_back(o.size());
      o += str(k.key);
      b.kv_type.push_back(o.size());
      o += pod(k.type);
      o += k.payload;
    }
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const T& t : tensors_) {
      TensorPos p;
      p.name_length = o.size();
      o += str(t.name);
      p.n_dims = o.size();
      o += pod(static_cast<uint32_t>(t.dims.size()));
      p.first_dim = o.size();
      for (uint64_t d : t.dims) o += pod(d);
      p.type = o.size();
      o += pod(t.type);
      p.offset = o.size();
      o += pod(offset);
      offsets.push_back(offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
      b.tensors.push_back(p);
    }
    b.tensor_infos_end = o.size();
    o.resize((o.size() + alignment - 1) / alignment * alignment, '\0');
    b.data_offset = o.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      o.resize(b.data_offset + offsets[i], '\0');
      o += tensors_[i].data;
    }
    return b;
  }

  template <typename V>
  static std::string pod(V v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(V));
  }
  static std::string str(const std::string& s) { return pod(static_cast<uint64_t>(s.size())) + s; }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::string payload;
  };
  struct T {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::string data;
  };
  uint32_t version_;
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

// Overwrites the bytes of `v` at `pos`.
template <typename V>
void patch(std::string& bytes, size_t pos, V v) {
  std::memcpy(bytes.data() + pos, &v, sizeof(V));
}

// Parses the first `size` bytes of `bytes` from a heap block of exactly that size.
inline absl::StatusOr<std::unique_ptr<GgufFile>> parse_bytes(const std::string& bytes, size_t size,
                                                              const std::string& source = "test.gguf") {
  std::shared_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  std::memcpy(copy.get(), bytes.data(), size);
  const uint8_t* data = copy.get();
  return GgufFile::parse(std::shared_ptr<const void>(copy, copy.get()), data, size, source);
}
inline absl::StatusOr<std::unique_ptr<GgufFile>> parse_bytes(const std::string& bytes) {
  return parse_bytes(bytes, bytes.size());
}

inline uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace exl3::testing
